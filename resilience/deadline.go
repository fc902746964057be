package resilience

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sundial-go/sundial/pipeline"
)

// ErrDeadline is the cause recorded on a handler's context when the
// invocation's deadline fires. It wraps context.DeadlineExceeded, so
// errors.Is(err, context.DeadlineExceeded) holds for it: http.Client returns
// context.Cause(ctx) as its error and grpc-go maps a cause to a status code,
// and both must still see a deadline.
var ErrDeadline = fmt.Errorf("sundial: invocation deadline exceeded: %w", context.DeadlineExceeded)

// DeadlineMiddleware is the first built-in of the Resilience stage. Create
// it with NewDeadlineMiddleware.
//
// For each invocation it computes the effective deadline — the earliest of
// the invocation's own (from the caller), now + the operation's Timeout,
// now + the kernel's MaxTimeout, and the parent context's deadline — stores
// it on the invocation, and runs the rest of the chain under a context that
// ends at that instant (with cause [ErrDeadline]). Every downstream call
// made with that context is bounded by it.
//
// Attribution looks only at the state of the tokens, never at the clock:
//
//   - the deadline token fired (the context ended with DeadlineExceeded —
//     this middleware's timer, or an upstream deadline such as grpc-go's
//     server context) -> TIMEOUT, KERNEL_TIMEOUT_001, whatever the handler
//     returned and whether or not the caller also cancelled;
//   - the deadline token did not fire and the caller's context was
//     cancelled -> CANCELLED, KERNEL_CANCELLED_001, even when the clock
//     already reads past the deadline;
//   - neither -> the handler's outcome, unchanged.
//
// A deadline already past on arrival (or a caller already gone) ends the
// invocation before anything inside runs: the breaker, the limiters and the
// handler never see it.
//
// The unattributed outcome is recorded with
// [pipeline.Invocation.SetOriginalOutcome]; it is what the
// ResilienceMiddleware's breaker counted.
type DeadlineMiddleware struct {
	timeout    time.Duration
	maxTimeout time.Duration
}

// NewDeadlineMiddleware returns a DeadlineMiddleware. timeout is the
// operation's default deadline and cap (0: none); maxTimeout is the
// kernel-wide cap on every deadline (0: none).
func NewDeadlineMiddleware(timeout, maxTimeout time.Duration) *DeadlineMiddleware {
	return &DeadlineMiddleware{timeout: max(timeout, 0), maxTimeout: max(maxTimeout, 0)}
}

// Effective returns the deadline this middleware would enforce for an
// invocation that arrives at now with the caller's deadline d (zero: none)
// and a parent context deadline pd (zero: none).
func (m *DeadlineMiddleware) Effective(now, d, pd time.Time) time.Time {
	earliest := func(a, b time.Time) time.Time {
		if a.IsZero() || (!b.IsZero() && b.Before(a)) {
			return b
		}
		return a
	}
	if m.timeout > 0 {
		d = earliest(d, now.Add(m.timeout))
	}
	if m.maxTimeout > 0 {
		d = earliest(d, now.Add(m.maxTimeout))
	}
	return earliest(d, pd)
}

// Invoke implements pipeline.Middleware.
func (m *DeadlineMiddleware) Invoke(inv *pipeline.Invocation, next pipeline.Handler) error {
	parent := inv.Context()
	if err := parent.Err(); err != nil {
		inv.SetOriginalOutcome(nil)
		return attributeDone(parent)
	}
	now := time.Now()
	d, _ := inv.Deadline()
	pd, _ := parent.Deadline()
	d = m.Effective(now, d, pd)
	if d.IsZero() {
		// No deadline anywhere: only the caller can end the call.
		err := next(inv)
		inv.SetOriginalOutcome(err)
		if parent.Err() != nil {
			return attributeDone(parent)
		}
		return err
	}
	inv.SetDeadline(d)
	if !d.After(now) {
		inv.SetOriginalOutcome(nil)
		return pipeline.ErrTimeout()
	}
	ctx, cancel := context.WithDeadlineCause(parent, d, ErrDeadline)
	defer cancel()
	inv.SetContext(ctx)
	defer inv.SetContext(parent)
	err := next(inv)
	inv.SetOriginalOutcome(err)
	if ctx.Err() != nil {
		return attributeDone(ctx)
	}
	return err
}

// attributeDone attributes an ended context: a deadline (its error or its
// cause is DeadlineExceeded) is TIMEOUT, anything else CANCELLED.
func attributeDone(ctx context.Context) error {
	if ctx.Err() == context.DeadlineExceeded || errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
		return pipeline.ErrTimeout()
	}
	return pipeline.ErrCancelled()
}

// IsOwnCancellation reports whether err is the invocation's own context
// ending — the handler returned ctx.Err() (or wrapped it, or returned a
// TIMEOUT/CANCELLED outcome) after the invocation's context was done. Such
// an outcome is the caller's deadline or cancellation, not a failure of the
// operation: breakers must not count it.
func IsOwnCancellation(ctx context.Context, err error) bool {
	if err == nil || ctx.Err() == nil {
		return false
	}
	k := pipeline.KindOf(err)
	return k == pipeline.KindTimeout || k == pipeline.KindCancelled
}
