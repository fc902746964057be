// Package client calls the operations of a Sundial service with their Go
// types and operation IDs, with no code generation. A [Client] is built
// once per operation over a [Transport]: HTTP (httpadapter), gRPC
// (grpcadapter), Connect (connectadapter), or a kernel in the same binary
// ([Local]). The call site is the same whichever transport carries the
// call:
//
//	charge, err := client.New[Charge, Receipt](t, "billing.charge",
//		client.WithDependency(k.Dependency("billing")))
//	// ...
//	receipt, err := charge.Call(ctx, Charge{OrderID: "o-1", Amount: 30})
//
// A call keeps the caller's side of every promise. It sends the context's
// deadline, less the margin ([WithMargin]). It carries the W3C trace
// context and baggage, so the caller's priority and idempotency key. It
// runs under the dependency's outbound policy: retries within the budget,
// hedging, breaker and throttle. A call that a tier above retries makes
// one attempt (see outbound.Dependency.Do).
//
// A failed call returns a *pipeline.Error. Its kind, code, message,
// details and retry-after are the same on every transport. Details are
// JSON values (numbers are float64). A retry-after is in whole seconds,
// rounded up, as the wire carries it. An UNEXPECTED outcome shows only
// [pipeline.UnexpectedMessage] and its code. When the call's own context
// ends first, the outcome is the kernel's TIMEOUT (KERNEL_TIMEOUT_001) or
// CANCELLED (KERNEL_CANCELLED_001), or the context's cause when it is an
// outcome. It wraps the context's error.
package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"time"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience/outbound"
)

// Transport carries the calls of a service's operations. Bind is called
// once per [Client], at New. It returns the operation's descriptor and
// the function that sends one attempt. That function gets a pointer to
// the input and a pointer to the output to fill. It returns nil, a
// *pipeline.Error for the service's answer, or the transport's error.
// An error with a method NotSent() bool that returns true sent nothing
// (see outbound.NotSent). The function must be safe for concurrent use:
// hedged attempts overlap.
type Transport interface {
	Bind(id string) (*operations.Descriptor, func(ctx context.Context, in, out any) error, error)
}

// Option configures a [Client].
type Option func(*config)

type config struct {
	dep    *outbound.Dependency
	margin time.Duration
}

// WithDependency runs every call under d's outbound policy: retries
// within its budget, hedging, breaker and throttle. Each attempt carries
// the same idempotency key (the caller's, or one d's CreateKey makes).
// Without it a call makes one attempt.
func WithDependency(d *outbound.Dependency) Option {
	return func(c *config) { c.dep = d }
}

// WithMargin keeps margin back from the context's deadline. The call, and
// the deadline it sends, end that much earlier, so the caller has time to
// use the answer. A negative margin counts as 0.
func WithMargin(margin time.Duration) Option {
	return func(c *config) { c.margin = max(margin, 0) }
}

// Client calls one operation. It is safe for concurrent use.
type Client[In, Out any] struct {
	send func(ctx context.Context, in, out any) error
	// k is the kernel of an in-process client (Local), which calls it
	// as kernel.Call does; else nil.
	k   *kernel.Kernel
	id  string
	cfg config
}

// New returns the client of operation id over t. It fails when t does not
// know the operation, when the operation is a stream, or when In and Out
// are not its input and output types.
func New[In, Out any](t Transport, id string, opts ...Option) (*Client[In, Out], error) {
	if t == nil {
		return nil, fmt.Errorf("client: operation %q: nil transport", id)
	}
	d, send, err := t.Bind(id)
	if err != nil {
		return nil, err
	}
	if d == nil || send == nil {
		return nil, fmt.Errorf("client: operation %q: the transport bound nothing", id)
	}
	if d.Kind() != operations.Unary {
		return nil, fmt.Errorf("client: operation %q is a %v operation, not unary", id, d.Kind())
	}
	if in, out := reflect.TypeFor[In](), reflect.TypeFor[Out](); d.Input != in || d.Output != out {
		return nil, fmt.Errorf("client: operation %q takes %v and returns %v, not %v and %v",
			id, d.Input, d.Output, in, out)
	}
	c := &Client[In, Out]{send: send}
	if l, ok := t.(local); ok {
		c.k, c.id = l.k, id
	}
	for _, o := range opts {
		if o != nil {
			o(&c.cfg)
		}
	}
	return c, nil
}

// Call calls the operation with in and returns its output, or a
// *pipeline.Error (see the package doc).
func (c *Client[In, Out]) Call(ctx context.Context, in In) (Out, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	if c.cfg.margin > 0 {
		if dl, ok := ctx.Deadline(); ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(ctx, dl.Add(-c.cfg.margin))
			defer cancel()
		}
	}
	var (
		out Out
		err error
	)
	if c.k != nil && c.cfg.dep == nil {
		out, err = kernel.Call[In, Out](ctx, c.k, c.id, in)
	} else {
		out, err = c.remote(ctx, in)
	}
	if err != nil {
		var zero Out
		return zero, outcome(ctx, err)
	}
	return out, nil
}

// remote makes the call through the transport, under the dependency if
// there is one. Its input and output escape to the transport's function:
// they are its own copies, so that an in-process call allocates neither.
func (c *Client[In, Out]) remote(ctx context.Context, in In) (Out, error) {
	var out Out
	if c.cfg.dep != nil {
		return out, c.through(ctx, &in, &out)
	}
	return out, c.send(ctx, &in, &out)
}

// through makes the call under the dependency. Each attempt fills an
// output of its own, so hedged attempts never share one; the first
// success is the call's.
func (c *Client[In, Out]) through(ctx context.Context, in *In, out *Out) error {
	var (
		mu   sync.Mutex
		done bool
	)
	return c.cfg.dep.Do(ctx, func(actx context.Context) error {
		var o Out
		if err := c.send(actx, in, &o); err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		if !done {
			*out, done = o, true
		}
		return nil
	})
}

// outcome returns the outcome of a call under ctx that failed with err.
// A failure that is no answer, or a TIMEOUT or CANCELLED, once ctx has
// ended is ctx's own end, whoever noticed it first: the server, the
// transport or the client. The context's error may lag its deadline by
// a timer's delay, so a passed deadline counts as its end too.
func outcome(ctx context.Context, err error) error {
	pe, coded := errors.AsType[*pipeline.Error](err)
	if coded && pe.Kind() != pipeline.KindTimeout && pe.Kind() != pipeline.KindCanceled {
		return wire(pe, err)
	}
	end := ctx.Err()
	if dl, ok := ctx.Deadline(); ok && end == nil && !time.Now().Before(dl) {
		end = context.DeadlineExceeded
	}
	if end == nil {
		return wire(pipeline.AsError(err), err)
	}
	cause := context.Cause(ctx)
	if cause == nil {
		cause = end
	}
	return wire(pipeline.AsError(cause), fmt.Errorf("%w (%w)", end, err))
}

// wire returns e as every transport carries it, wrapping cause: the safe
// message and details of an UNEXPECTED outcome, details as JSON values,
// and the retry-after in whole seconds, rounded up, at least 1.
func wire(e *pipeline.Error, cause error) *pipeline.Error {
	if e.Kind() == pipeline.KindUnexpected {
		return pipeline.Wrap(e.Kind(), e.Code(), pipeline.UnexpectedMessage, cause)
	}
	out := pipeline.Wrap(e.Kind(), e.Code(), e.Message(), cause)
	for k, v := range e.Details() {
		out = out.WithDetail(k, jsonValue(v))
	}
	if d, ok := e.RetryAfter(); ok {
		out = out.WithRetryAfter(max(time.Second, (d+time.Second-1)/time.Second*time.Second))
	}
	return out
}

// jsonValue returns v as encoding/json decodes it into an any.
func jsonValue(v any) any {
	switch v.(type) {
	case nil, string, bool, float64:
		return v
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	var out any
	if json.Unmarshal(b, &out) != nil {
		return fmt.Sprint(v)
	}
	return out
}

// Local returns the transport of the operations of k, a kernel in the
// same binary. A call runs through the operation's handle
// (kernel.Op.Invoke) on the calling goroutine, with the caller's context:
// its deadline, baggage and span. The input's constraints are checked
// first, as the adapters check them. As with kernel.Call, a handler that
// ignores its context delays the answer past the deadline.
func Local(k *kernel.Kernel) Transport { return local{k} }

type local struct{ k *kernel.Kernel }

// Bind implements Transport.
func (l local) Bind(id string) (*operations.Descriptor, func(ctx context.Context, in, out any) error, error) {
	if l.k == nil {
		return nil, nil, fmt.Errorf("client: operation %q: nil kernel", id)
	}
	if op := l.find(id); op != nil {
		return op.Descriptor(), func(ctx context.Context, in, out any) error { return l.invoke(ctx, op, in, out) }, nil
	}
	return nil, nil, fmt.Errorf("client: the kernel has no operation %q", id)
}

// find returns the handle of operation id, or nil.
func (l local) find(id string) *kernel.Op {
	if l.k == nil {
		return nil
	}
	for _, op := range l.k.Operations() {
		if op.Descriptor().ID == id {
			return op
		}
	}
	return nil
}

// unary returns the call of op with input in: its constraints' failure,
// when it has some and they fail, is the call's decoding failure, as the
// adapters have it.
func (local) unary(op *kernel.Op, in any) kernel.Unary {
	u := kernel.Unary{Input: in}
	if !op.Descriptor().Constrained() {
		return u
	}
	if perr := op.Descriptor().CheckConstraints(in); perr != nil {
		u.Decode = func(time.Time) (any, error) { return nil, perr }
	}
	return u
}

// invoke makes one call of op in-process; out points to the output.
func (l local) invoke(ctx context.Context, op *kernel.Op, in, out any) error {
	o := op.Invoke(ctx, l.unary(op, in))
	if o.Err != nil || o.Output == nil {
		return o.Err
	}
	dst := reflect.ValueOf(out).Elem()
	v := reflect.ValueOf(o.Output)
	if !v.Type().AssignableTo(dst.Type()) {
		return returned(op, o.Output)
	}
	dst.Set(v)
	return nil
}

// returned is the outcome of op returning v, not of its output type.
func returned(op *kernel.Op, v any) error {
	return pipeline.NewError(pipeline.KindUnexpected, pipeline.CodeUnexpected,
		fmt.Sprintf("client: operation %q returned %T", op.Descriptor().ID, v))
}
