package grpcadapter

import (
	"context"

	"google.golang.org/grpc/metadata"

	"github.com/sundial-go/sundial/adapters/internal/rpccall"
	"github.com/sundial-go/sundial/kernel"
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
	return a.srv.Prepare(a.metadata(ctx, id, full), parent, full, c)
}

// inbound returns the invocation's parent context for a call whose server
// context is ctx (see rpccall.Server.Inbound). stop releases the parent;
// call it once the kernel has answered.
func (a *Adapter) inbound(ctx context.Context) (parent context.Context, stop func()) {
	return a.srv.Inbound(ctx)
}

// mdBaggage is the metadata key of the W3C baggage.
const mdBaggage = rpccall.MDBaggage

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

func (m incomingMD) Get(key string) string { return rpccall.First(m.Values(key)) }

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

// metadata returns the incoming metadata of the server context ctx as a
// carrier, with baggage over the WithBaggageLimit hidden (and a warning
// logged, sampled: callers send such metadata at will).
func (a *Adapter) metadata(ctx context.Context, op, full string) incomingMD {
	md := incomingMD{ctx: ctx, baggage: metadata.ValueFromIncomingContext(ctx, mdBaggage)}
	md.noBaggage = a.baggageOver(ctx, md.baggage, op, full)
	return md
}

// baggageOver reports whether the baggage values vs are over the
// WithBaggageLimit, and then logs a warning, sampled.
func (a *Adapter) baggageOver(ctx context.Context, vs []string, op, full string) bool {
	return a.srv.BaggageOver(ctx, vs, op, full)
}
