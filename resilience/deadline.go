package resilience

import (
	"context"
	"errors"
	"time"

	"github.com/sundial-go/sundial/pipeline"
)

// ErrDeadline is the cause recorded on a handler's context when the
// invocation's deadline fires. It wraps context.DeadlineExceeded, so
// errors.Is(err, context.DeadlineExceeded) holds for it: http.Client returns
// context.Cause(ctx) as its error, and grpc-go's status.FromContextError
// maps a cause wrapping neither DeadlineExceeded nor Canceled to Unknown;
// both must still see a deadline, not an UNEXPECTED outcome.
var ErrDeadline error = deadlineError{}

type deadlineError struct{}

func (deadlineError) Error() string { return "resilience: invocation deadline exceeded" }
func (deadlineError) Unwrap() error { return context.DeadlineExceeded }

// Timeout and Temporary make ErrDeadline look like the net package's
// timeout errors, as context.DeadlineExceeded does.
func (deadlineError) Timeout() bool   { return true }
func (deadlineError) Temporary() bool { return true }

// DeadlineMiddleware is the first built-in of the Resilience stage. Create
// it with [NewDeadlineMiddleware]; it is safe for concurrent use and keeps
// no per-call state outside the invocation.
//
// For each invocation it computes the effective deadline — the earliest of
// the invocation's own (the caller's), now + the operation's Timeout,
// now + the kernel's MaxTimeout, and the parent context's deadline — stores
// it on the invocation, and runs the rest of the chain under a context that
// ends at that instant with cause [ErrDeadline]. Every downstream call made
// with that context is bounded by it, and the handler's context is cancelled
// at the deadline even when the handler ignores it. A downstream deadline is
// therefore never later than the upstream one.
//
// # Attribution
//
// When the chain returns, the outcome is attributed from the state of the
// tokens alone, never by reading the clock:
//
//   - the deadline token fired — the handler's context ended with
//     DeadlineExceeded, from this middleware's timer or from an upstream
//     deadline such as grpc-go's server context — -> TIMEOUT,
//     KERNEL_TIMEOUT_001, whatever the handler returned and whether or not
//     the caller also cancelled;
//   - the deadline token did not fire and the caller's context was
//     cancelled -> CANCELLED, KERNEL_CANCELLED_001, even when the clock
//     already reads past the deadline (a timer may run a little after the
//     clock passes its instant);
//   - neither -> the chain's outcome, unchanged.
//
// What the handler returned does not matter once a token has ended its
// context: ctx.Err(), a wrapped cancellation, a CANCELLED outcome of its own,
// success or any other error are all attributed by the rules above.
//
// Ties are resolved by token order, which is the only order there is: the
// first token to end the handler's context decides. A caller whose own
// deadline is the same instant (a gRPC client's grpc-timeout, a parent
// context.WithDeadline) ends the context with DeadlineExceeded, so that tie
// is always TIMEOUT; a cancellation that lands after the deadline token
// fired — even at the same instant — is TIMEOUT too, because a context that
// has ended never ends again. Only a raw cancel racing the deadline's own
// timer goroutine at one instant has no order to read; it is attributed by
// whichever the runtime ran first, and the result always agrees with the
// handler's context (see docs/deadlines.md).
//
// # Deadlines that need no timer of their own
//
// When the parent context already ends at the effective deadline (an
// adapter's or a caller's context.WithDeadline, grpc-go's server context),
// or when the effective deadline is the kernel-wide cap — the caller sent
// no earlier deadline and the operation has no Timeout of its own — the
// handler's context is created only when something waits on it (Done, or
// Err once it has ended): Deadline reports the deadline from the start,
// and a call that finishes without blocking on its context pays for no
// timer. The outcome and the context's behaviour are the same, with one
// exception for the cap that only a handler ignoring its context can
// meet: if nothing looked at the context before both the cap passed and
// the caller went away, the outcome is TIMEOUT, whichever came first. When
// the parent's deadline is the effective one, the context's cause is the
// parent's.
//
// # Arrival
//
// On arrival the middleware decides whether to start work at all: a
// deadline already at or before now ends the invocation with TIMEOUT, and a
// caller already gone ends it with CANCELLED (TIMEOUT if its context ended
// with a deadline), before anything inside runs: the breaker, the limiters
// and the handler never see it.
//
// # Original and attributed outcomes
//
// The middleware returns the attributed outcome (what adapters, logs,
// traces and metrics report) and records the unattributed one with
// [pipeline.Invocation.SetOriginalOutcome] — the outcome as the middleware
// inside it (the breaker) must count it. When the handler's context ended
// and the handler reported that ending ([IsOwnCancellation]), the original
// outcome is a CANCELLED outcome wrapping what the handler returned: the
// caller's own deadline is not a failure of the operation. For an
// invocation ended on arrival the original outcome is the attributed one.
type DeadlineMiddleware struct {
	timeout    time.Duration
	maxTimeout time.Duration

	// derive creates the handler's context; nil means
	// context.WithDeadlineCause. Tests replace it to hold the deadline token
	// back while the clock moves on.
	derive func(parent context.Context, d time.Time, cause error) (context.Context, context.CancelFunc)
}

// NewDeadlineMiddleware returns a DeadlineMiddleware. timeout is the
// operation's default deadline and the cap on what a caller sends (0 or
// negative: none); maxTimeout is the kernel-wide cap on every deadline (0
// or negative: none).
func NewDeadlineMiddleware(timeout, maxTimeout time.Duration) *DeadlineMiddleware {
	return &DeadlineMiddleware{timeout: max(timeout, 0), maxTimeout: max(maxTimeout, 0)}
}

// Effective returns the deadline this middleware enforces for an
// invocation that arrives at now with the caller's deadline d and a parent
// context whose deadline is pd (the zero time: none): the earliest of d,
// pd, now + timeout and now + maxTimeout. The zero time means no deadline
// at all (only possible when both caps are 0).
func (m *DeadlineMiddleware) Effective(now, d, pd time.Time) time.Time {
	if m.timeout > 0 {
		d = earliest(d, now.Add(m.timeout))
	}
	if m.maxTimeout > 0 {
		d = earliest(d, now.Add(m.maxTimeout))
	}
	return earliest(d, pd)
}

// earliest returns the earlier of a and b, treating the zero time as "no
// deadline".
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

// Invoke implements pipeline.Middleware.
func (m *DeadlineMiddleware) Invoke(inv *pipeline.Invocation, next pipeline.Handler) error {
	return m.invoke(inv, inner{next: next})
}

// inner is what runs inside the middleware: next, or the limits l
// around next when the two run as one Stage.
type inner struct {
	next pipeline.Handler
	l    *OperationLimits
	a    admission // what l admitted before the handler's context existed
}

func (in *inner) run(inv *pipeline.Invocation) error {
	if in.l == nil {
		return in.next(inv)
	}
	return in.l.proceed(inv, in.next, in.a)
}

func (m *DeadlineMiddleware) invoke(inv *pipeline.Invocation, in inner) error {
	parent := inv.Context()
	now := time.Now()
	d, _ := inv.Deadline()
	pd, _ := parent.Deadline()
	d = m.Effective(now, d, pd)
	if d.IsZero() {
		// No deadline anywhere: only the caller can end the call.
		if parent.Err() != nil {
			return endOnArrival(inv, attributeDone(parent))
		}
		if err := in.admit(); err != nil {
			return endOnArrival(inv, err)
		}
		return attribute(inv, parent, in.run(inv))
	}
	inv.SetDeadline(d)
	// Deciding whether to start is the one place the clock is read: a
	// deadline at or before now has fired already (context.WithDeadline
	// makes the same decision), and it wins over a caller that is also gone.
	if !d.After(now) {
		return endOnArrival(inv, pipeline.ErrTimeout())
	}
	if parent.Err() != nil {
		return endOnArrival(inv, attributeDone(parent))
	}
	if err := in.admit(); err != nil {
		return endOnArrival(inv, err)
	}
	if m.derive == nil {
		// No timer of ours until something waits on the context (see
		// lazyContext) when the parent ends at the deadline by itself, or
		// when only the kernel-wide cap bounds the call.
		if bound := !pd.IsZero() && d.Equal(pd); bound || (m.maxTimeout > 0 && d.Equal(now.Add(m.maxTimeout))) {
			return runLazy(inv, &lazyContext{parent: parent, deadline: d, bound: bound}, &in)
		}
	}
	derive := m.derive
	if derive == nil {
		derive = context.WithDeadlineCause
	}
	return run(inv, parent, derive, d, &in)
}

// admit lets the limits of a Stage decide what they can without waiting,
// before the handler's context exists: a rejection costs no context.
func (in *inner) admit() (rejected error) {
	if in.l != nil {
		in.a, rejected = in.l.admitNow()
	}
	return rejected
}

// run runs the chain under a context derived from parent that ends at d.
// (Kept apart from Invoke, whose many returns would stop the compiler
// from open-coding these defers.)
func run(inv *pipeline.Invocation, parent context.Context, derive func(context.Context, time.Time, error) (context.Context, context.CancelFunc), d time.Time, in *inner) error {
	ctx, cancel := derive(parent, d, ErrDeadline)
	defer cancel()
	inv.SetContext(ctx)
	defer inv.SetContext(parent)
	return attribute(inv, ctx, in.run(inv))
}

// runLazy is run under a lazyContext.
func runLazy(inv *pipeline.Invocation, c *lazyContext, in *inner) error {
	defer c.end()
	inv.SetContext(c)
	defer inv.SetContext(c.parent)
	return attribute(inv, c, in.run(inv))
}

// endOnArrival ends an invocation before anything inside the middleware
// ran: the original outcome is the attributed one.
func endOnArrival(inv *pipeline.Invocation, err error) error {
	inv.SetOriginalOutcome(err)
	return err
}

// attribute records the original outcome of the chain that ran under ctx
// and returns the attributed one. The context's state is read once, so both
// outcomes agree on it.
func attribute(inv *pipeline.Invocation, ctx context.Context, err error) error {
	done := ctx.Err() != nil
	if err != nil && ownCancellation(done, err) && pipeline.KindOf(err) != pipeline.KindCancelled {
		inv.SetOriginalOutcome(errOwnEnd.WithCause(err))
	} else {
		inv.SetOriginalOutcome(err)
	}
	if !done {
		return err
	}
	return attributeDone(ctx)
}

// errOwnEnd is the original outcome of a handler that reported its own
// context's end. It never reaches a caller: the attributed outcome does.
var errOwnEnd = pipeline.Cancelled(pipeline.CodeCancelled, "The invocation's own deadline or cancellation ended the handler.")

// attributeDone attributes an ended context: a deadline (its error, or its
// cause, is DeadlineExceeded — this middleware's token or an upstream
// deadline) is TIMEOUT, anything else CANCELLED.
func attributeDone(ctx context.Context) error {
	if ctx.Err() == context.DeadlineExceeded || errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
		return pipeline.ErrTimeout()
	}
	return pipeline.ErrCancelled()
}

// IsOwnCancellation reports whether err reports the invocation's own end
// rather than a failure of the operation: err is a TIMEOUT or CANCELLED
// outcome (ctx.Err(), a wrapped context error, or a *pipeline.Error of
// either kind) and either the invocation's context ctx has ended, or err is
// a [BudgetExhaustedError] whose allotment was bounded by the invocation's
// deadline (the handler stopped early for the same reason the deadline
// would have stopped it). A breaker must not count such an outcome: a
// caller's own short deadline would otherwise open the breaker for
// everyone. A TIMEOUT reported while ctx is still live — a downstream's
// 504, or a call cut by its own per-call cap — is a real failure and is not
// an own cancellation.
//
// ctx is the handler's context, i.e. inv.Context() inside the Resilience
// stage. IsOwnCancellation(ctx, nil) is false.
func IsOwnCancellation(ctx context.Context, err error) bool {
	return err != nil && ownCancellation(ctx.Err() != nil, err)
}

// ownCancellation is IsOwnCancellation for a context whose state (done) was
// read already.
func ownCancellation(done bool, err error) bool {
	if k := pipeline.KindOf(err); k != pipeline.KindTimeout && k != pipeline.KindCancelled {
		return false
	}
	if done {
		return true
	}
	be, ok := errors.AsType[*BudgetExhaustedError](err)
	return ok && be.callerBound
}
