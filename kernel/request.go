package kernel

import (
	"context"
	"time"

	"github.com/sundial-go/sundial/kernel/telemetry"
	"github.com/sundial-go/sundial/pipeline"
)

// Request is what a protocol hands the kernel for one call: what the
// caller sent, decoded. Cancellation and trace context travel on the
// context given with it (adapters extract W3C trace context and baggage
// into it with telemetry.Propagator); everything else is here.
type Request struct {
	// Operation is the ID of the operation called; "" for a host endpoint,
	// which runs Handler through the host pipeline (no per-operation
	// limits).
	Operation string
	// Protocol is the entry point; Route the transport route (e.g.
	// "POST /orders"), or "".
	Protocol pipeline.Protocol
	Route    string
	// Input is the decoded input, typically a pointer to the operation's
	// input type.
	Input any
	// Decode, when not nil, decodes the input instead: the kernel calls it
	// once, after computing the effective deadline (the zero time: none),
	// which bounds a read of the input (an HTTP body), and before anything
	// runs. A non-nil error is the call's outcome, observed like Reject.
	Decode func(deadline time.Time) (any, error)
	// Deadline is the deadline the caller sent; the zero time: none. The
	// context's deadline, when earlier, counts as the caller's too.
	Deadline time.Time
	// Arrival is when the call arrived, as the protocol read the clock
	// (e.g. to turn a relative timeout into Deadline); the zero time: the
	// kernel reads the clock itself. The invocation's deadline, budget and
	// duration are measured from it.
	Arrival time.Time
	// IdempotencyKey is the caller's idempotency key from a protocol
	// header; when empty, the baggage's sundial.idempotency-key member is
	// used. The kernel puts it into the handler's context's baggage, so
	// that downstream calls carry it.
	IdempotencyKey string
	// Priority is the class the caller asked for in a protocol header
	// (Sundial-Priority, gRPC metadata sundial-priority, --priority), as
	// sent; "" when none. It can only lower the operation's class (see
	// pipeline.Invocation.Priority): the kernel keeps the lower of the two,
	// and of the baggage's sundial.priority member. A value naming no
	// class rejects the call with KERNEL_VALIDATION_009.
	Priority string
	// Handler, when not nil, runs at the end of the operation's chain in
	// place of its registered handler — an application's own gRPC service
	// method under the operation's pipeline — or, for a host endpoint, is
	// the endpoint.
	Handler pipeline.Handler
	// Transport describes the protocol request in the terms of the
	// OpenTelemetry semantic conventions (HTTP method, route, scheme,
	// status; gRPC method, code): the invocation's span and the
	// conventions' duration metric carry them. The zero value: none.
	Transport telemetry.Transport
	// Reject, when not nil, is the outcome of a call the adapter turned
	// away before the pipeline (a malformed deadline header, a body that
	// does not decode, an unknown route): the kernel observes it like any
	// other response — span, metrics, trace ID — and returns it without
	// running anything.
	Reject error
}

// entry converts req for the handle's entries.
func (k *Kernel) entry(req *Request) (*compiled, Unary, error) {
	u := Unary{Caller: Caller{Protocol: req.Protocol, Route: req.Route, Deadline: req.Deadline,
		Arrival: req.Arrival, IdempotencyKey: req.IdempotencyKey, Priority: req.Priority,
		Transport: Transport(req.Transport)}, Input: req.Input, Decode: req.Decode, Handler: req.Handler}
	c := k.host
	if req.Operation != "" {
		c = k.ops[req.Operation]
	}
	var rej error
	if req.Reject != nil {
		rej = pipeline.AsError(req.Reject)
	}
	return c, u, rej
}

// Invoke is Op.Invoke by ID.
func (k *Kernel) Invoke(ctx context.Context, req Request) Outcome {
	c, u, rej := k.entry(&req)
	up := &u
	return k.invoke(ctx, c, up, rej, req.Operation)
}

// Handle is Op.Handle by ID.
func (k *Kernel) Handle(ctx context.Context, req Request) Outcome {
	c, u, rej := k.entry(&req)
	up := &u
	if rej != nil || c == nil {
		return k.invoke(ctx, c, up, rej, req.Operation)
	}
	return k.handle(ctx, c, up)
}

// Serve is Op.Serve by ID.
func (k *Kernel) Serve(ctx context.Context, req Request, respond func(Outcome)) {
	c, u, rej := k.entry(&req)
	up := &u
	if rej != nil || c == nil {
		respond(k.invoke(ctx, c, up, rej, req.Operation))
		return
	}
	k.serveCall(ctx, c, up, respond)
}

var _ = telemetry.Transport{}
