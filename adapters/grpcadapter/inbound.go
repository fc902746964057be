package grpcadapter

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"google.golang.org/grpc/metadata"

	"github.com/sundial-go/sundial/adapters/internal/rpcbridge"
	"github.com/sundial-go/sundial/kernel"
	kprop "github.com/sundial-go/sundial/kernel/propagation"
	"github.com/sundial-go/sundial/pipeline"
)

// This file builds the invocation of a call: its parent context, its
// trace context and baggage, and the caller's idempotency key.

// invoke runs one call of an application's own method, whose server
// context is ctx, through the kernel and returns its outcome by the
// invocation's deadline whatever the handler does. h runs under op's
// chain in place of its handler, or under the host pipeline when op is
// nil. input is the request message (nil for a stream).
func (a *Adapter) invoke(ctx context.Context, full string, op *kernel.Op, input any, h pipeline.Handler) kernel.Outcome {
	parent, stop := a.inbound(ctx)
	defer stop()
	if op == nil {
		c := kernel.HostCall{Handler: h, Guarded: true}
		parent = a.prepare(ctx, parent, full, "", &c.Caller)
		return a.k.Host(parent, c)
	}
	u := kernel.Unary{Input: input, Handler: h}
	parent = a.prepare(ctx, parent, full, op.Descriptor().ID, &u.Caller)
	return op.Handle(parent, u)
}

// prepare fills in c for a call of the operation id ("" for none) whose
// server context is ctx — the protocol, the route (the full method name),
// the caller's priority and idempotency key — and returns the
// invocation's parent context (see inbound) carrying the trace context
// and baggage of the request metadata.
func (a *Adapter) prepare(ctx, parent context.Context, full, id string, c *kernel.Caller) context.Context {
	return a.prepareFrom(a.metadata(ctx, id, full), parent, full, c)
}

// prepareFrom is prepare with the request metadata md.
func (a *Adapter) prepareFrom(md rpcbridge.Carrier, parent context.Context, full string, c *kernel.Caller) context.Context {
	parent = a.extract(parent, md)
	c.Protocol = pipeline.ProtocolGRPC
	if c.Route == "" {
		c.Route = full
	}
	if c.Transport.RPCMethod == "" {
		c.Transport = kernel.Transport{RPCMethod: full, Status: statusCode}
	}
	// A repeated priority names no class: KERNEL_VALIDATION_009.
	if vs := md.Values(mdPriority); len(vs) == 1 {
		c.Priority = vs[0]
	} else if len(vs) > 1 {
		c.Priority = strings.Join(vs, ", ")
	}
	// A repeated key is malformed; the kernel checks a single one's
	// grammar. A malformed key is InvalidArgument KERNEL_VALIDATION_005 on
	// an operation that takes keys, and ignored on one that does not.
	if vs := md.Values(mdIdempotencyKey); len(vs) == 1 {
		c.IdempotencyKey = vs[0]
	} else if len(vs) > 1 {
		c.BadIdempotencyKey = true
	}
	return parent
}

// inbound returns the invocation's parent context for a call whose server
// context is ctx. The kernel reads the caller's deadline from it.
//
// Without a deadline the parent is ctx itself. With one, the parent keeps
// ctx's values but not its cancellation. When ctx ends, the parent ends
// with a cause that says which token fired. It is the deadline when ctx's
// own deadline fired. It is the deadline too when the cancellation arrived
// no earlier than the tolerance before the deadline: a client's deadline
// timer, seen from the server. Otherwise it is the caller's cancellation.
// The kernel attributes the outcome from that cause. stop releases the
// parent; call it once the kernel has answered.
func (a *Adapter) inbound(ctx context.Context) (parent context.Context, stop func()) {
	d, ok := ctx.Deadline()
	if !ok {
		return ctx, func() {}
	}
	base, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	withDeadline, cancelDeadline := context.WithDeadline(base, d)
	tolerance := a.cfg.tolerance
	after := context.AfterFunc(ctx, func() {
		if ctx.Err() == context.DeadlineExceeded || !time.Now().Before(d.Add(-tolerance)) {
			cancel(errCallerDeadline)
			return
		}
		cancel(context.Cause(ctx))
	})
	return withDeadline, func() {
		after()
		cancelDeadline()
		cancel(nil)
	}
}

// errCallerDeadline is the cause of a parent context ended by the
// caller's deadline. It wraps context.DeadlineExceeded, which is what the
// kernel attributes as TIMEOUT.
var errCallerDeadline = fmt.Errorf("grpcadapter: the caller's deadline passed: %w", context.DeadlineExceeded)

// Metadata keys the adapter reads.
const (
	mdBaggage        = "baggage"
	mdIdempotencyKey = "idempotency-key"
	mdPriority       = "sundial-priority" // kernel.Caller.Priority
)

// incomingMD reads the incoming metadata of a server context key by key,
// as a propagation.TextMapCarrier for Extract. On every call,
// metadata.FromIncomingContext copies every key and value. That costs more
// than the rest of the adapter's per-call work. A call reads only a few
// keys, most of them absent. grpc-go looks for an absent key by comparing
// it with every key present. The baggage values are read once (metadata)
// and kept. With noBaggage set, it hides the baggage metadata.
type incomingMD struct {
	ctx       context.Context
	baggage   []string
	noBaggage bool
}

// Values returns the values of key (propagation.ValuesGetter: the W3C
// baggage propagator reads every baggage value through it).
func (m incomingMD) Values(key string) []string {
	if key == mdBaggage {
		if m.noBaggage {
			return nil
		}
		return m.baggage
	}
	return metadata.ValueFromIncomingContext(m.ctx, key)
}

func (m incomingMD) Get(key string) string { return m.first(m.Values(key)) }

// first returns the first of vs, or "".
func (incomingMD) first(vs []string) string {
	if len(vs) > 0 {
		return vs[0]
	}
	return ""
}

// Set does nothing: Extract only reads.
func (incomingMD) Set(string, string) {}

func (m incomingMD) Keys() []string {
	md, _ := metadata.FromIncomingContext(m.ctx)
	keys := make([]string, 0, len(md))
	for k := range md {
		if !m.noBaggage || k != mdBaggage {
			keys = append(keys, k)
		}
	}
	return keys
}

// msgBaggageDropped is the message of the record of dropped baggage
// metadata.
const msgBaggageDropped = "grpcadapter: baggage metadata dropped"

// metadata returns the incoming metadata of the server context ctx as a
// carrier, with baggage over the WithBaggageLimit hidden (and a warning
// logged, sampled: callers send such metadata at will).
func (a *Adapter) metadata(ctx context.Context, op, full string) incomingMD {
	md := incomingMD{ctx: ctx, baggage: metadata.ValueFromIncomingContext(ctx, mdBaggage)}
	md.noBaggage = a.baggageOver(ctx, md.baggage, op, full)
	return md
}

// baggageOver reports whether the baggage values vs are over the
// WithBaggageLimit, and then logs a warning, sampled: callers send such
// metadata at will.
func (a *Adapter) baggageOver(ctx context.Context, vs []string, op, full string) bool {
	size := 0
	for _, v := range vs {
		size += len(v)
	}
	if size <= a.cfg.baggageLimit {
		return false
	}
	a.baggageLog.LogAttrs(ctx, slog.LevelWarn, msgBaggageDropped,
		slog.String("operation", cmp.Or(op, full)), slog.Int("bytes", size), slog.Int("limit", a.cfg.baggageLimit))
	return true
}

// extract returns parent carrying the W3C baggage of md, which the kernel
// copies into the invocation, and what the propagator extracts from it
// (by default the W3C trace context, which the invocation's span
// continues).
func (a *Adapter) extract(parent context.Context, md rpcbridge.Carrier) context.Context {
	if a.cfg.defaultPropagator {
		return kprop.Propagator().Extract(parent, md) // trace context and baggage
	}
	parent = propagation.Baggage{}.Extract(parent, md)
	if p := a.cfg.propagator; p != nil {
		parent = p.Extract(parent, md)
	}
	return parent
}
