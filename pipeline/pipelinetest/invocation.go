package pipelinetest

import (
	"context"
	"time"

	"github.com/sundial-go/sundial/pipeline"
)

// Operation is a [pipeline.Operation] with nothing but an ID, for the
// Operation of a [pipeline.Spec]:
//
//	pipelinetest.NewInvocation(pipeline.Spec{Operation: pipelinetest.Operation("orders.get")})
type Operation string

// OperationID returns o.
func (o Operation) OperationID() string { return string(o) }

// Mark is the replay mark of every invocation NewInvocation makes from a
// Spec that names none. Give it to the idempotency middleware under test
// (idempotency.Config.Mark), so that its replays set Reply.Replayed.
var Mark pipeline.ReplayMark

// NewInvocation returns the invocation [pipeline.NewInvocation] makes from
// s, with the deadlines reconciled as the kernel would. The zero Spec is an
// in-process call of no operation, with no route, input, deadline or
// baggage.
//
// A caller's deadline (CallerDeadline) at or before the effective one, or
// without one, becomes the effective deadline with
// [pipeline.DeadlineCaller] as its source. An effective deadline whose
// source is the caller (or not given) is also the caller's deadline when
// no caller's deadline was set. Without a deadline, the source is
// [pipeline.DeadlineNone].
func NewInvocation(s pipeline.Spec) *pipeline.Invocation {
	if s.ReplayMark == nil {
		s.ReplayMark = &Mark
	}
	if s.Deadline.IsZero() {
		s.DeadlineSource = pipeline.DeadlineNone
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

// Remaining returns the time left before inv's deadline at now (negative
// once it passed); without a deadline, the largest Duration.
func Remaining(inv *pipeline.Invocation, now time.Time) time.Duration {
	d, ok := inv.Deadline()
	if !ok {
		return time.Duration(1<<63 - 1)
	}
	return d.Sub(now)
}

// Expired reports whether inv's deadline is at or before now.
func Expired(inv *pipeline.Invocation, now time.Time) bool {
	d, ok := inv.Deadline()
	return ok && !d.After(now)
}

// Recover returns h with a panic turned into an UNEXPECTED outcome
// wrapping a *pipeline.PanicError, as the kernel recovers a handler's.
func Recover(h pipeline.Handler) pipeline.Handler {
	return func(ctx context.Context, inv *pipeline.Invocation) (out any, err error) {
		defer func() {
			if v := recover(); v != nil {
				out, err = nil, pipeline.Wrap(pipeline.KindUnexpected, pipeline.CodeUnexpected,
					pipeline.UnexpectedMessage, &pipeline.PanicError{Value: v})
			}
		}()
		return h(ctx, inv)
	}
}

// KindOf returns the kind of an outcome: KindOK for nil, else the kind of
// [pipeline.AsError](err).
func KindOf(err error) pipeline.Kind {
	if err == nil {
		return pipeline.KindOK
	}
	return pipeline.AsError(err).Kind()
}

// CodeOf returns the code of an outcome: "" for nil, else the code of
// [pipeline.AsError](err).
func CodeOf(err error) string {
	if err == nil {
		return ""
	}
	return pipeline.AsError(err).Code()
}

// Kinds returns every kind, in table order, for tests that cover the whole
// outcome table.
func Kinds() []pipeline.Kind {
	var ks []pipeline.Kind
	for k := pipeline.KindOK; k <= pipeline.KindUnexpected; k++ {
		ks = append(ks, k)
	}
	return ks
}

// ParseKind returns the kind named s, as its String method prints it.
func ParseKind(s string) (pipeline.Kind, bool) {
	for _, k := range Kinds() {
		if k.String() == s {
			return k, true
		}
	}
	return pipeline.KindUnexpected, false
}

// Stages returns every stage, in execution order.
func Stages() []pipeline.Stage {
	var ss []pipeline.Stage
	for s := pipeline.StageDiagnostics; s <= pipeline.StageHandle; s++ {
		ss = append(ss, s)
	}
	return ss
}

// WithCause returns a copy of e, details and retry-after included, that
// wraps cause.
func WithCause(e *pipeline.Error, cause error) *pipeline.Error {
	c := pipeline.Wrap(e.Kind(), e.Code(), e.Message(), cause)
	for k, v := range e.Details() {
		c = c.WithDetail(k, v)
	}
	if d, ok := e.RetryAfter(); ok {
		c = c.WithRetryAfter(d)
	}
	return c
}

// RetryAfterSeconds returns e's retry-after in whole seconds, rounded up
// and at least 1, as the adapters send it, and whether e has one.
func RetryAfterSeconds(e *pipeline.Error) (int64, bool) {
	d, ok := e.RetryAfter()
	if !ok {
		return 0, false
	}
	return max(1, int64((d+time.Second-1)/time.Second)), true
}

// DetailRetryAfter is the details key under which the adapters send an
// outcome's retry-after, in whole seconds.
const DetailRetryAfter = "retryAfter"

// CallerDeadline returns inv's caller's deadline and whether it sent one.
func CallerDeadline(inv *pipeline.Invocation) (time.Time, bool) {
	d := inv.Timing().CallerDeadline
	return d, !d.IsZero()
}

// Arrival returns when inv arrived at the kernel and whether that is known.
func Arrival(inv *pipeline.Invocation) (time.Time, bool) {
	at := inv.Timing().Arrival
	return at, !at.IsZero()
}
