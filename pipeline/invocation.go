package pipeline

import "time"

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
	ProtocolMCP
)

// String returns "inprocess", "http", "grpc", "cli" or "mcp".
func (p Protocol) String() string {
	switch p {
	case ProtocolHTTP:
		return "http"
	case ProtocolGRPC:
		return "grpc"
	case ProtocolCLI:
		return "cli"
	case ProtocolMCP:
		return "mcp"
	}
	return "inprocess"
}

// DeadlineSource says which deadline binds an invocation: the earliest of
// the caller's, the operation's own (TimeoutSeconds) and the kernel-wide cap
// (MaxTimeoutSeconds). When two are the same instant, the caller's wins
// over the operation's, and the operation's over the cap.
type DeadlineSource uint8

// The deadline sources.
const (
	// DeadlineNone: the invocation has no deadline at all (no caller
	// deadline, no TimeoutSeconds and no cap).
	DeadlineNone DeadlineSource = iota
	// DeadlineCaller: the caller's deadline binds (a Sundial-Deadline or
	// Sundial-Timeout-Ms header, grpc-timeout, --timeout, or the parent
	// context's deadline of an in-process call).
	DeadlineCaller
	// DeadlineOperation: the operation's TimeoutSeconds binds.
	DeadlineOperation
	// DeadlineKernel: the kernel-wide MaxTimeoutSeconds binds.
	DeadlineKernel
)

// String returns "none", "caller", "operation" or "kernel".
func (s DeadlineSource) String() string {
	switch s {
	case DeadlineCaller:
		return "caller"
	case DeadlineOperation:
		return "operation"
	case DeadlineKernel:
		return "kernel"
	}
	return "none"
}

// Spec lists the facts of one invocation, for [NewInvocation]. The kernel
// fills it from what a protocol received; tests fill it by hand (see
// pipeline/pipelinetest).
type Spec struct {
	// Operation is the operation called; nil for a host endpoint.
	Operation Operation
	// Protocol is the entry point.
	Protocol Protocol
	// Route is the transport route (e.g. "POST /orders"), or "".
	Route string
	// Input is the decoded input, typically a pointer to the operation's
	// input type.
	Input any
	// CallerDeadline is the deadline the caller sent; the zero time: none.
	CallerDeadline time.Time
	// Deadline is the effective deadline; the zero time: none. When it is
	// set and DeadlineSource is DeadlineNone, the source is DeadlineCaller.
	Deadline time.Time
	// DeadlineSource says which deadline Deadline is.
	DeadlineSource DeadlineSource
	// Baggage is the caller's baggage. NewInvocation keeps the map: the
	// caller must not change it afterwards.
	Baggage map[string]string
	// IdempotencyKey is the caller's idempotency key, or "".
	IdempotencyKey string
	// Arrival is when the invocation arrived (the kernel's one reading of
	// the clock for it); the zero time: unknown.
	Arrival time.Time
	// Priority is the invocation's effective class: the operation's, as
	// the caller may have lowered it (the zero value: PriorityDefault).
	Priority Priority
	// ReplayMark is the one mark that may set the reply's Replayed (nil:
	// none may).
	ReplayMark *ReplayMark
}

// Invocation is one call of an operation (or of a host endpoint) in the
// pipeline. It holds the call's facts, fixed when it is made: operation,
// protocol, route, input, deadlines, baggage and idempotency key.
//
// An Invocation has no setters: the context travels as the first argument
// of every [Handler], and the outcome is what the handler returns. Its
// methods are safe for concurrent use. A nil *Invocation reports no
// operation, no deadline and no baggage.
type Invocation struct {
	operation      Operation
	route          string
	protocol       Protocol
	source         DeadlineSource
	input          any
	callerDeadline time.Time
	deadline       time.Time
	arrival        time.Time
	baggage        map[string]string
	idempotencyKey string
	priority       Priority
	mark           *ReplayMark
	reply          Reply
}

// NewInvocation returns the invocation s describes. Times are kept as
// given, monotonic clock readings included (see Invocation.Deadline).
func NewInvocation(s Spec) *Invocation {
	inv := &Invocation{
		operation:      s.Operation,
		route:          s.Route,
		protocol:       s.Protocol,
		input:          s.Input,
		baggage:        s.Baggage,
		idempotencyKey: s.IdempotencyKey,
		arrival:        s.Arrival,
		priority:       s.Priority,
		mark:           s.ReplayMark,
	}
	if !s.CallerDeadline.IsZero() {
		inv.callerDeadline = s.CallerDeadline
	}
	if !s.Deadline.IsZero() {
		inv.deadline = s.Deadline
		inv.source = s.DeadlineSource
		if inv.source == DeadlineNone {
			inv.source = DeadlineCaller
		}
	}
	return inv
}

// Operation returns the operation called, or nil for a host endpoint.
func (inv *Invocation) Operation() Operation {
	if inv == nil {
		return nil
	}
	return inv.operation
}

// OperationID returns the operation's ID, or "" for a host endpoint.
func (inv *Invocation) OperationID() string {
	if inv == nil || inv.operation == nil {
		return ""
	}
	return inv.operation.OperationID()
}

// Route returns the transport route, or "".
func (inv *Invocation) Route() string {
	if inv == nil {
		return ""
	}
	return inv.route
}

// Name returns the operation ID, or the route of a host endpoint.
func (inv *Invocation) Name() string {
	if id := inv.OperationID(); id != "" {
		return id
	}
	return inv.Route()
}

// Protocol returns the entry point the invocation came through.
func (inv *Invocation) Protocol() Protocol {
	if inv == nil {
		return ProtocolInProcess
	}
	return inv.protocol
}

// Input returns the decoded input.
func (inv *Invocation) Input() any {
	if inv == nil {
		return nil
	}
	return inv.input
}

// Deadline returns the effective deadline and whether there is one. Inside
// the Resilience stage and below, the handler's context ends at this
// instant. When the kernel computed it from the clock (now plus a timeout)
// it carries a monotonic reading, so that comparing it with time.Now is
// immune to changes of the wall clock; use Deadline().UTC() to print or
// send it.
func (inv *Invocation) Deadline() (time.Time, bool) {
	if inv == nil {
		return time.Time{}, false
	}
	return inv.deadline, !inv.deadline.IsZero()
}

// Timing is when an invocation arrived and which deadline binds it. A
// zero time is one not known or not sent.
type Timing struct {
	// Arrival is when the invocation arrived at the kernel. The effective
	// deadline was computed at that instant.
	Arrival time.Time
	// CallerDeadline is the deadline the caller sent, as it was given. It
	// may be later than [Invocation.Deadline].
	CallerDeadline time.Time
	// Source says which deadline binds: the caller's, the operation's own
	// or the kernel's cap (DeadlineNone without a deadline).
	Source DeadlineSource
}

// Timing returns when the invocation arrived and which deadline binds it.
func (inv *Invocation) Timing() Timing {
	if inv == nil {
		return Timing{}
	}
	return Timing{Arrival: inv.arrival, CallerDeadline: inv.callerDeadline, Source: inv.source}
}

// Baggage returns the caller's baggage member key.
func (inv *Invocation) Baggage(key string) (string, bool) {
	if inv == nil {
		return "", false
	}
	v, ok := inv.baggage[key]
	return v, ok
}

// RangeBaggage calls f for each baggage member, in no particular order,
// until f returns false.
func (inv *Invocation) RangeBaggage(f func(key, value string) bool) {
	if inv == nil {
		return
	}
	for k, v := range inv.baggage {
		if !f(k, v) {
			return
		}
	}
}

// Reply returns the invocation's response side, the one part of it a
// middleware writes: fields and notes every adapter sends with the answer
// (see [Reply]). A nil Invocation has none (nil, which ignores writes).
func (inv *Invocation) Reply() *Reply {
	if inv == nil {
		return nil
	}
	return &inv.reply
}

// IdempotencyKey returns the caller's idempotency key, or "".
func (inv *Invocation) IdempotencyKey() string {
	if inv == nil {
		return ""
	}
	return inv.idempotencyKey
}

// Priority returns the invocation's effective class: its operation's
// configured class, lowered by the caller if it asked (the Sundial-Priority
// header, gRPC metadata sundial-priority, --priority, or the baggage member
// sundial.priority). A caller never raises it.
func (inv *Invocation) Priority() Priority {
	if inv == nil {
		return PriorityDefault
	}
	return inv.priority
}
