package pipeline

import (
	"context"
	"time"
)

// Operation is what the pipeline needs to know of a registered operation.
// *operations.Descriptor implements it.
type Operation interface {
	OperationID() string
}

// Protocol says which entry point an invocation came through.
type Protocol uint8

// The protocols.
const (
	ProtocolInProcess Protocol = iota
	ProtocolHTTP
	ProtocolGRPC
	ProtocolCLI
)

func (p Protocol) String() string {
	switch p {
	case ProtocolHTTP:
		return "http"
	case ProtocolGRPC:
		return "grpc"
	case ProtocolCLI:
		return "cli"
	}
	return "inprocess"
}

// BaggageIdempotencyKey is the baggage key that carries a caller's
// idempotency key (see [Invocation.IdempotencyKey]).
const BaggageIdempotencyKey = "sundial.idempotency-key"

// Invocation is one call of an operation (or of a host endpoint) travelling
// through the pipeline. It carries the per-call facts — the context, the
// absolute deadline, baggage, the operation, the protocol — and the outcome
// slot.
//
// An Invocation is used by one call at a time: middleware and the handler
// run sequentially on it, so its methods are not safe for concurrent use.
// A handler that starts goroutines must pass them the context, not the
// Invocation.
type Invocation struct {
	ctx       context.Context
	deadline  time.Time // zero: none
	operation Operation
	route     string
	protocol  Protocol
	input     any
	output    any
	baggage   map[string]string

	outcome     error
	original    error
	originalSet bool
	terminal    Handler

	traceID string
}

// NewInvocation returns an invocation of op (nil for a host endpoint) with
// the given parent context (the transport's cancellation) and input. A nil
// ctx is context.Background().
func NewInvocation(ctx context.Context, op Operation, input any) *Invocation {
	if ctx == nil {
		ctx = context.Background()
	}
	return &Invocation{ctx: ctx, operation: op, input: input}
}

// Context returns the invocation's current context. Inside the Resilience
// stage and below, it carries the invocation's deadline.
func (inv *Invocation) Context() context.Context { return inv.ctx }

// SetContext replaces the context for the middleware and handler that run
// after the caller. Middleware that calls it must restore the previous
// context before returning. A nil ctx is ignored.
func (inv *Invocation) SetContext(ctx context.Context) {
	if ctx != nil {
		inv.ctx = ctx
	}
}

// Deadline returns the invocation's absolute deadline and whether it has
// one.
func (inv *Invocation) Deadline() (time.Time, bool) { return inv.deadline, !inv.deadline.IsZero() }

// SetDeadline sets the absolute deadline; the zero time removes it. The
// deadline is stored in UTC.
func (inv *Invocation) SetDeadline(d time.Time) {
	if d.IsZero() {
		inv.deadline = time.Time{}
		return
	}
	inv.deadline = d.UTC()
}

// Remaining returns how long remains until the deadline at now: negative
// once it has passed, and a very large duration when there is no deadline.
func (inv *Invocation) Remaining(now time.Time) time.Duration {
	if inv.deadline.IsZero() {
		return time.Duration(1<<63 - 1)
	}
	return inv.deadline.Sub(now)
}

// Expired reports whether the deadline is at or before now. An invocation
// without a deadline never expires. Expired reads the clock: use it to
// decide whether to start work, never to tell a timeout from a
// cancellation (that is the DeadlineMiddleware's job).
func (inv *Invocation) Expired(now time.Time) bool {
	return !inv.deadline.IsZero() && !inv.deadline.After(now)
}

// Operation returns the invocation's operation, or nil for a host endpoint.
func (inv *Invocation) Operation() Operation { return inv.operation }

// OperationID returns the operation's ID, or "" for a host endpoint.
func (inv *Invocation) OperationID() string {
	if inv.operation == nil {
		return ""
	}
	return inv.operation.OperationID()
}

// Route returns the host endpoint's route (e.g. "GET /healthz"), set by the
// adapter for invocations without an operation.
func (inv *Invocation) Route() string { return inv.route }

// SetRoute sets the route name used for invocations without an operation.
func (inv *Invocation) SetRoute(r string) { inv.route = r }

// Name is the operation ID, or the route for a host endpoint.
func (inv *Invocation) Name() string {
	if id := inv.OperationID(); id != "" {
		return id
	}
	return inv.route
}

// Protocol returns the entry point of the call.
func (inv *Invocation) Protocol() Protocol { return inv.protocol }

// SetProtocol records the entry point of the call.
func (inv *Invocation) SetProtocol(p Protocol) { inv.protocol = p }

// Input returns the decoded input (for a typed operation, a pointer to its
// input type).
func (inv *Invocation) Input() any { return inv.input }

// SetInput replaces the input.
func (inv *Invocation) SetInput(in any) { inv.input = in }

// Output returns what the handler produced; it is meaningful only when the
// outcome is nil.
func (inv *Invocation) Output() any { return inv.output }

// SetOutput stores the handler's result.
func (inv *Invocation) SetOutput(out any) { inv.output = out }

// Baggage returns the baggage value for key.
func (inv *Invocation) Baggage(key string) (string, bool) {
	v, ok := inv.baggage[key]
	return v, ok
}

// SetBaggage sets a baggage member. Adapters fill baggage from the
// transport (W3C baggage header, gRPC metadata).
func (inv *Invocation) SetBaggage(key, value string) {
	if inv.baggage == nil {
		inv.baggage = make(map[string]string, 2)
	}
	inv.baggage[key] = value
}

// RangeBaggage calls f for each baggage member until f returns false.
func (inv *Invocation) RangeBaggage(f func(key, value string) bool) {
	for k, v := range inv.baggage {
		if !f(k, v) {
			return
		}
	}
}

// IdempotencyKey returns the caller's idempotency key (baggage
// "sundial.idempotency-key"), or "". A client that retries a
// non-idempotent call after a TIMEOUT must send one.
func (inv *Invocation) IdempotencyKey() string { return inv.baggage[BaggageIdempotencyKey] }

// Outcome returns the invocation's final, attributed outcome (nil for
// success) once the pipeline has run. This is what adapters, logs, traces
// and metrics report.
func (inv *Invocation) Outcome() error { return inv.outcome }

// SetOutcome records the final outcome. The kernel calls it when the
// pipeline returns.
func (inv *Invocation) SetOutcome(err error) { inv.outcome = err }

// OriginalOutcome returns the outcome as the handler (and the middleware
// inside the Resilience stage) produced it, before the DeadlineMiddleware
// attributed it — this is what a circuit breaker counts. When no
// DeadlineMiddleware ran, it equals Outcome.
func (inv *Invocation) OriginalOutcome() error {
	if !inv.originalSet {
		return inv.outcome
	}
	return inv.original
}

// SetOriginalOutcome records the unattributed outcome.
func (inv *Invocation) SetOriginalOutcome(err error) {
	inv.original, inv.originalSet = err, true
}

// TraceID returns the W3C trace ID (32 lower-case hex digits) of the
// invocation's span, or "" when no span was recorded for it. The
// Diagnostics middleware sets it; adapters report it (Problem Details
// "traceId", access logs) after the pipeline has returned.
func (inv *Invocation) TraceID() string { return inv.traceID }

// SetTraceID records the trace ID of the invocation's span.
func (inv *Invocation) SetTraceID(id string) { inv.traceID = id }

// Terminal returns the handler that runs in place of the operation's
// registered handler for this invocation (see SetTerminal), or nil.
func (inv *Invocation) Terminal() Handler { return inv.terminal }

// SetTerminal makes h the end of the chain for this invocation only: the
// kernel's compiled chain (deadline, limits, middleware) runs as usual and
// then calls h instead of the operation's registered handler. The kernel's
// InvokeWith and InvokeFunc use it; a nil h restores the registered one.
func (inv *Invocation) SetTerminal(h Handler) { inv.terminal = h }
