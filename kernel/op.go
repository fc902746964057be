package kernel

import (
	"context"
	"time"

	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience"
	"github.com/sundial-go/sundial/resilience/idempotency"
)

// Op is the handle of one registered operation. An adapter takes the
// handles from Operations when it mounts its routes. It keeps one per
// route and runs every call of that route through it. The kernel makes
// the handles at New; they stay valid across Reload.
type Op struct {
	k *Kernel
	c *compiled
}

// Operations returns the handle of every registered operation, sorted by
// ID. It returns the same handles on every call.
func (k *Kernel) Operations() []*Op { return k.handles }

// Descriptor returns the operation's descriptor.
func (o *Op) Descriptor() *operations.Descriptor { return o.c.desc }

// Policy returns the operation's resilience policy in force. A reload
// changes it. It is the zero Policy when the built-in middleware is off.
func (o *Op) Policy() resilience.Policy { return o.k.policyFor(o.c.desc.ID) }

// Idempotency returns the operation's idempotency policy and the lease of
// the kernel's idempotency store. The policy is the zero Policy when the
// operation takes no keys. The lease is 0 when the records die with the
// process, or when no operation takes keys.
func (o *Op) Idempotency() (p idempotency.Policy, lease time.Duration) {
	if s := o.k.idemStore; s != nil {
		lease = s.Lease()
	}
	return o.c.idem, lease
}

// Caller is what every entry knows of the caller. Cancellation and trace
// context travel on the context given with the entry. An adapter extracts
// W3C trace context and baggage into that context.
type Caller struct {
	// Protocol is the entry point.
	Protocol pipeline.Protocol
	// Route is the transport route, such as "POST /orders", or "".
	Route string
	// Deadline is the deadline the caller sent; the zero time: none.
	// The context's deadline counts as the caller's too when earlier.
	Deadline time.Time
	// Arrival is when the call arrived, as the adapter read the clock.
	// The zero time: the kernel reads the clock itself. The deadline,
	// budget and duration of the call are measured from it.
	Arrival time.Time
	// IdempotencyKey is the key from a protocol header, as sent.
	// When empty, the baggage's sundial.idempotency-key member is used.
	// The kernel passes a valid key on in the handler's baggage.
	IdempotencyKey string
	// BadIdempotencyKey reports a key whose transport syntax failed:
	// a repeated header, or one that does not parse.
	// The kernel treats it as a malformed IdempotencyKey.
	BadIdempotencyKey bool
	// Priority is the class the caller asked for in a protocol header,
	// as sent; "" when none. It can only lower the operation's class.
	// A value naming no class rejects the call (KERNEL_VALIDATION_009).
	Priority string
	// Transport describes the protocol request for spans and metrics.
	Transport Transport
}

// Unary is one unary call of an operation.
type Unary struct {
	Caller
	// Input is the decoded input, typically a pointer to the input type.
	Input any
	// Decode, when not nil, decodes the input instead of Input.
	// The kernel calls it once, after it computed the effective deadline.
	// That deadline (zero: none) bounds a read of the input.
	// An error is the call's outcome, observed like a rejection.
	Decode func(deadline time.Time) (any, error)
	// Handler, when not nil, runs at the end of the operation's chain in
	// place of its registered handler: an application's own gRPC method.
	Handler pipeline.Handler
	// direct: Handler runs outside the chain, which the call never builds.
	direct bool
}

// HostCall is one call of a host endpoint: an application's own handler
// run under the kernel's edge and its host pipeline. The host pipeline
// has the deadline and the application's middleware, and no
// per-operation limits.
type HostCall struct {
	Caller
	// Handler is the endpoint.
	Handler pipeline.Handler
	// Guarded runs the handler as Op.Handle does: the answer leaves by the
	// deadline whatever the handler does. Otherwise the handler runs on
	// the calling goroutine, and Host returns when it does.
	Guarded bool
}

// Invoke runs one call on the calling goroutine and returns its outcome.
// It returns when the chain does. A handler that ignores its context
// delays it; its context still ends at the deadline.
func (o *Op) Invoke(ctx context.Context, u Unary) Outcome {
	return o.k.invoke(ctx, o.c, &u, nil, "")
}

// Handle runs one call and returns its outcome by the invocation's
// deadline, whatever the handler does. The chain runs on a goroutine of
// its own. When the deadline passes, or the caller goes away, Handle
// waits a settle window of a few milliseconds. It then returns TIMEOUT
// or CANCELLED while the chain runs on. The chain keeps its concurrency
// slot until its handler returns. The kernel logs its late result once.
// Kernel.Wait waits for such stragglers.
func (o *Op) Handle(ctx context.Context, u Unary) Outcome {
	return o.k.handle(ctx, o.c, &u)
}

// Serve runs one call on the calling goroutine and calls respond exactly
// once with the outcome. It calls respond when the chain returns, or by
// the invocation's deadline from another goroutine while the chain runs
// on. Serve returns when the chain and respond have returned. It logs a
// straggler's late result once.
//
// respond must not block for long: on the calling goroutine it delays
// Serve's return.
func (o *Op) Serve(ctx context.Context, u Unary, respond func(Outcome)) {
	o.k.serveCall(ctx, o.c, &u, respond)
}

// Reject observes a call of the operation that the adapter turned away
// before the pipeline, and returns err as its outcome. Nothing runs. A
// malformed deadline header or an undecodable message is such a call.
func (o *Op) Reject(ctx context.Context, c Caller, err error) Outcome {
	return o.k.invoke(ctx, o.c, &Unary{Caller: c}, pipeline.AsError(err), "")
}

// Host runs one call of a host endpoint and returns its outcome.
func (k *Kernel) Host(ctx context.Context, h HostCall) Outcome {
	u := Unary{Caller: h.Caller, Handler: h.Handler}
	if h.Guarded {
		return k.handle(ctx, k.host, &u)
	}
	return k.invoke(ctx, k.host, &u, nil, "")
}

// Reject observes a call that matched no operation and no endpoint, and
// returns err as its outcome. An unknown route or method is such a call.
func (k *Kernel) Reject(ctx context.Context, c Caller, err error) Outcome {
	return k.invoke(ctx, k.host, &Unary{Caller: c}, pipeline.AsError(err), "")
}

// Transport describes the protocol request of one call in the terms of
// the OpenTelemetry semantic conventions for HTTP and RPC servers. The
// call's span and the conventions' duration metric carry its attributes.
// The zero Transport records none of them.
type Transport struct {
	// HTTP: the method as received, the matched route template ("" when
	// none matched), the URL scheme, path and host, and the protocol
	// version ("1.1", "2").
	Method, Route, Scheme, Path, Host, ProtocolVersion string
	// RPC: the full gRPC method name ("/shop.v1.Billing/Charge"). An
	// unknown method (RPCUnknown) is recorded as _OTHER.
	RPCMethod  string
	RPCUnknown bool
	// Status returns the protocol status the outcome err (nil: success)
	// is answered with: the HTTP status code, or the gRPC code. Without
	// it, success is 200 or OK, and a failure 500 or INTERNAL (13).
	Status func(err error) int
}
