// Package deadlinectx holds the steps of the deadline middleware, shared
// by package deadline and by the resilience limits that run inside it.
// Each step is a plain function, so the limits' state stays on the
// caller's stack: no step takes an interface or a closure.
//
// A call goes through Arrive, then Enter when it has a deadline, then
// Result when its chain returns. Scope.End ends the handler's context.
package deadlinectx

import (
	"context"
	"errors"
	"time"

	"github.com/sundial-go/sundial/pipeline"
)

// ErrDeadline is the cause recorded on a handler's context when the
// invocation's deadline fires (see package deadline).
var ErrDeadline error = deadlineError{}

type deadlineError struct{}

func (deadlineError) Error() string { return "resilience: invocation deadline exceeded" }
func (deadlineError) Unwrap() error { return context.DeadlineExceeded }

// Timeout and Temporary make ErrDeadline look like the net package's
// timeout errors, as context.DeadlineExceeded does.
func (deadlineError) Timeout() bool   { return true }
func (deadlineError) Temporary() bool { return true }

// Derive creates a handler's context that ends at d with cause.
type Derive func(parent context.Context, d time.Time, cause error) (context.Context, context.CancelFunc)

// Attribute returns TIMEOUT when ctx ended by a deadline, CANCELLED when
// it ended otherwise, and nil while it has not ended.
func Attribute(ctx context.Context) *pipeline.Error {
	switch err := ctx.Err(); {
	case err == nil:
		return nil
	case err == context.DeadlineExceeded || errors.Is(context.Cause(ctx), context.DeadlineExceeded):
		return pipeline.ErrTimeout()
	}
	return pipeline.ErrCanceled()
}

// Arrive decides whether a call starts. It returns the call's deadline
// d, whether it has one, and the outcome of a call that must not start.
func Arrive(ctx context.Context, inv *pipeline.Invocation) (d time.Time, ok bool, err error) {
	d, ok = inv.Deadline()
	// A deadline at or before the arrival has fired already, as
	// context.WithDeadline decides too, and it wins over a caller that is
	// also gone.
	if ok && expiredOnArrival(inv, d) {
		return d, ok, pipeline.ErrTimeout()
	}
	if ctx.Err() != nil {
		return d, ok, Attribute(ctx)
	}
	return d, ok, nil
}

// expiredOnArrival reports whether the deadline d of inv was at or before
// its arrival. The operation's and the kernel's deadlines are set on
// arrival to now plus a positive duration, so only a caller's can be.
// Only an invocation made without an arrival reads the clock here.
func expiredOnArrival(inv *pipeline.Invocation, d time.Time) bool {
	t := inv.Timing() // once: it is a copy of several words
	if t.Arrival.IsZero() {
		return !d.After(time.Now())
	}
	return t.Source == pipeline.DeadlineCaller && !d.After(t.Arrival)
}

// Scope is the handler's context of one call under a deadline.
type Scope struct {
	// Ctx is the handler's context.
	Ctx context.Context
	// Lazy is Ctx when it is a Lazy, for Settle; nil otherwise.
	Lazy   *Lazy
	cancel context.CancelFunc
}

// Enter returns the scope of a call under deadline d, derived from
// parent. A nil derive makes a Lazy where no timer is needed yet, and
// uses context.WithDeadlineCause otherwise; tests pass their own.
func Enter(parent context.Context, inv *pipeline.Invocation, d time.Time, derive Derive) Scope {
	if derive == nil {
		// No timer of ours until something waits on the context when the
		// parent ends at the deadline by itself; or when nothing ends it
		// earlier and either the deadline is the kernel-wide cap or the
		// parent can never be cancelled (no race between the deadline and
		// a cancellation to order).
		pd, hasPD := parent.Deadline()
		bound := hasPD && d.Equal(pd)
		if bound || (!hasPD || pd.After(d)) && (inv.Timing().Source == pipeline.DeadlineKernel || parent.Done() == nil) {
			c := &Lazy{parent: parent, deadline: d, bound: bound}
			return Scope{Ctx: c, Lazy: c}
		}
		derive = context.WithDeadlineCause
	}
	ctx, cancel := derive(parent, d, ErrDeadline)
	return Scope{Ctx: ctx, cancel: cancel}
}

// End ends the scope's context: the call has returned.
func (s Scope) End() {
	if s.Lazy != nil {
		s.Lazy.End()
		return
	}
	s.cancel()
}

// Result returns the attributed outcome of a chain that ran under ctx and
// returned out, err. It reads the context's state once. What the chain
// returned becomes the cause of an attributed outcome.
func Result(ctx context.Context, out any, err error) (any, error) {
	if ctx.Err() == nil {
		return out, err
	}
	e := Attribute(ctx)
	if err != nil && err != error(e) {
		return nil, pipeline.Wrap(e.Kind(), e.Code(), e.Message(), err)
	}
	return nil, e
}

// TooLate reports whether the deadline of inv has passed, read from the
// clock just before the handler's chain would start. The handler's
// context cannot say so yet: a timer runs a little after its instant. A
// handler must never start under a deadline that has passed. A deadline
// with a monotonic reading costs one read of the monotonic clock alone.
func TooLate(inv *pipeline.Invocation) bool {
	d, ok := inv.Deadline()
	return ok && time.Until(d) <= 0
}
