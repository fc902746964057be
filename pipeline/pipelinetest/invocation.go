package pipelinetest

import (
	"time"

	"github.com/sundial-go/sundial/pipeline"
)

// Operation is a [pipeline.Operation] with nothing but an ID.
type Operation string

// OperationID returns o.
func (o Operation) OperationID() string { return string(o) }

// An Option sets a field of the [pipeline.Spec] that NewInvocation builds.
// Write one of your own to set what the With functions do not, e.g. an
// operation descriptor:
//
//	pipelinetest.Option(func(s *pipeline.Spec) { s.Operation = desc })
type Option func(*pipeline.Spec)

// NewInvocation returns an invocation made by [pipeline.NewInvocation] from
// the options, applied in order. Without options it is an in-process call
// of no operation, with no route, input, deadline or baggage.
//
// The deadlines are then reconciled as the kernel would: a caller's
// deadline ([WithCallerDeadline]) at or before the effective one, or
// without one, becomes the effective deadline with [pipeline.DeadlineCaller]
// as its source; an effective deadline whose source is the caller (or not
// given) is also the caller's deadline when no caller's deadline was set.
func NewInvocation(opts ...Option) *pipeline.Invocation {
	var s pipeline.Spec
	for _, o := range opts {
		if o != nil {
			o(&s)
		}
	}
	if !s.CallerDeadline.IsZero() && (s.Deadline.IsZero() || !s.CallerDeadline.After(s.Deadline)) {
		s.Deadline, s.DeadlineSource = s.CallerDeadline, pipeline.DeadlineCaller
	}
	if !s.Deadline.IsZero() {
		if s.DeadlineSource == pipeline.DeadlineNone {
			s.DeadlineSource = pipeline.DeadlineCaller
		}
		if s.DeadlineSource == pipeline.DeadlineCaller && s.CallerDeadline.IsZero() {
			s.CallerDeadline = s.Deadline
		}
	}
	return pipeline.NewInvocation(s)
}

// WithOperation sets the operation to an [Operation] with the given ID; ""
// leaves the invocation without one (a host endpoint).
func WithOperation(id string) Option {
	return func(s *pipeline.Spec) {
		if id == "" {
			s.Operation = nil
			return
		}
		s.Operation = Operation(id)
	}
}

// WithProtocol sets the protocol.
func WithProtocol(p pipeline.Protocol) Option {
	return func(s *pipeline.Spec) { s.Protocol = p }
}

// WithRoute sets the route, e.g. "POST /orders".
func WithRoute(r string) Option {
	return func(s *pipeline.Spec) { s.Route = r }
}

// WithInput sets the decoded input.
func WithInput(v any) Option {
	return func(s *pipeline.Spec) { s.Input = v }
}

// WithDeadline sets the effective deadline and its source. The zero time
// removes the deadline.
func WithDeadline(d time.Time, src pipeline.DeadlineSource) Option {
	return func(s *pipeline.Spec) {
		if d.IsZero() {
			s.Deadline, s.DeadlineSource = time.Time{}, pipeline.DeadlineNone
			return
		}
		s.Deadline, s.DeadlineSource = d, src
	}
}

// WithTimeout sets the effective deadline to d after the time NewInvocation
// is called, with the operation as its source (as an operation's
// TimeoutSeconds would).
func WithTimeout(d time.Duration) Option {
	return func(s *pipeline.Spec) {
		s.Deadline, s.DeadlineSource = time.Now().Add(d), pipeline.DeadlineOperation
	}
}

// WithCallerDeadline sets the deadline the caller sent. See NewInvocation
// for how it bears on the effective deadline.
func WithCallerDeadline(t time.Time) Option {
	return func(s *pipeline.Spec) { s.CallerDeadline = t }
}

// WithBaggage adds the baggage member key=value.
func WithBaggage(key, value string) Option {
	return func(s *pipeline.Spec) {
		if s.Baggage == nil {
			s.Baggage = make(map[string]string)
		}
		s.Baggage[key] = value
	}
}

// WithIdempotencyKey sets the caller's idempotency key.
func WithIdempotencyKey(key string) Option {
	return func(s *pipeline.Spec) { s.IdempotencyKey = key }
}
