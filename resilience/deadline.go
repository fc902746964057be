package resilience

import (
	"context"
	"errors"
	"time"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience/internal/deadlinectx"
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
// no per-call state.
//
// It enforces the invocation's effective deadline, [pipeline.Invocation.Deadline]
// — computed once, on arrival, by the kernel: the earliest of the caller's,
// the operation's TimeoutSeconds and the kernel-wide cap — by running the
// rest of the chain under a context derived from its own that ends at that
// instant with cause [ErrDeadline]. Every downstream call made with that
// context is bounded by it, and the handler's context is cancelled at the
// deadline even when the handler ignores it: a downstream deadline is never
// later than the upstream one. An invocation without a deadline runs under
// the context it was given.
//
// # Attribution
//
// When the chain returns, the outcome is attributed from the state of the
// handler's context alone, never by reading the clock ([Attribute]):
//
//   - the context ended with DeadlineExceeded — this middleware's deadline,
//     or an upstream one such as grpc-go's server context — -> TIMEOUT,
//     KERNEL_TIMEOUT_001, whatever the handler returned and whether or not
//     the caller also cancelled;
//   - the context ended otherwise (the caller cancelled) -> CANCELLED,
//     KERNEL_CANCELLED_001, even when the clock already reads past the
//     deadline (a timer may run a little after the clock passes its
//     instant);
//   - the context did not end -> the chain's outcome, unchanged.
//
// When a context's end decides the outcome, what the chain returned (when
// it returned an error other than the attributed one) is the attributed
// outcome's cause: errors.Unwrap gives it to telemetry and logs, and it
// never reaches a caller.
//
// Ties are resolved by the context, which is the only order there is: the
// first to end it decides. A caller whose own deadline is the same instant
// ends the context with DeadlineExceeded, so that tie is TIMEOUT; a
// cancellation that lands after the deadline fired is TIMEOUT too, because a
// context that has ended never ends again. Only a raw cancel racing the
// deadline's own timer at one instant has no order to read; it is
// attributed by whichever the runtime ran first, and the result always
// agrees with the handler's context (see docs/deadlines.md).
//
// # A timer only when something waits
//
// When the context given already ends at the effective deadline (the
// kernel's guard, a caller's context.WithDeadline, grpc-go's server
// context), when the effective deadline is the kernel-wide cap, or when
// the context given can never be cancelled (context.Background), the
// handler's context is created only when something waits on it (Done, or
// Err once it has ended): Deadline reports the deadline from the start,
// and a call that finishes without blocking on its context pays for no
// timer. The outcome and the context's behaviour are the same as with a
// timer from the start, with one exception for the cap that only a
// handler ignoring its context can meet: if nothing looked at the context
// before both the cap passed and the caller went away, the outcome is
// TIMEOUT, whichever came first.
//
// # Arrival
//
// On arrival the middleware decides whether to start work at all: a
// deadline already at or before now ends the invocation with TIMEOUT, and a
// caller already gone ends it with CANCELLED (TIMEOUT if its context ended
// with a deadline), before anything inside runs: the limits and the
// handler never see it. "Now" is the invocation's arrival
// ([pipeline.Invocation.Arrival], the kernel's one reading of the clock).
// The clock is read once more when the rest of the chain would start,
// after the limits admitted the call: a deadline that has passed by then
// ends the invocation with TIMEOUT, the limits take it as neutral, and
// nothing inside runs. A timer runs a little after its instant, so the
// handler's context alone cannot say so yet.
//
// # Limits inside
//
// [WithLimits] runs an operation's [Limits] inside the
// deadline as one middleware (the kernel does): the breaker and the limits
// without a queue decide before the handler's context exists, so a
// rejection costs no context and no timer.
type DeadlineMiddleware struct {
	limits *Limits // nil: none

	// derive creates the handler's context; nil means
	// context.WithDeadlineCause. Tests replace it to hold the deadline token
	// back while the clock moves on.
	derive func(parent context.Context, d time.Time, cause error) (context.Context, context.CancelFunc)
}

// DeadlineOption configures a DeadlineMiddleware.
type DeadlineOption interface{ applyDeadline(*DeadlineMiddleware) }

type deadlineOptionFunc func(*DeadlineMiddleware)

func (f deadlineOptionFunc) applyDeadline(m *DeadlineMiddleware) { f(m) }

// WithLimits runs the operation's limits l inside the deadline, as one
// middleware. A nil l adds nothing; one without any limit configured costs
// one atomic load per call, and applies the limits an Update gives it.
func WithLimits(l *Limits) DeadlineOption {
	return deadlineOptionFunc(func(m *DeadlineMiddleware) { m.limits = l })
}

// NewDeadlineMiddleware returns a DeadlineMiddleware. It never returns nil.
func NewDeadlineMiddleware(opts ...DeadlineOption) *DeadlineMiddleware {
	m := &DeadlineMiddleware{}
	for _, o := range opts {
		if o != nil {
			o.applyDeadline(m)
		}
	}
	return m
}

// Invoke implements pipeline.Middleware. It runs next under a context
// derived from ctx that ends at inv.Deadline(), and returns next's result
// with the attributed outcome.
func (m *DeadlineMiddleware) Invoke(ctx context.Context, inv *pipeline.Invocation, next pipeline.Handler) (any, error) {
	d, ok := inv.Deadline()
	if !ok {
		// No deadline anywhere: only the caller can end the call.
		if ctx.Err() != nil {
			return nil, Attribute(ctx)
		}
		var a admission
		if err := m.admit(inv, &a); err != nil {
			return nil, err
		}
		out, err := m.run(ctx, inv, next, &a)
		return attribute(ctx, out, err)
	}
	// Deciding whether to start: a deadline at or before the invocation's
	// arrival has fired already (context.WithDeadline makes the same
	// decision), and it wins over a caller that is also gone. The arrival
	// is the kernel's reading of the clock; only an invocation made
	// without one reads it here.
	if expiredOnArrival(inv, d) {
		return nil, pipeline.ErrTimeout()
	}
	if ctx.Err() != nil {
		return nil, Attribute(ctx)
	}
	var a admission
	if err := m.admit(inv, &a); err != nil {
		return nil, err
	}
	if m.derive == nil {
		// No timer of ours until something waits on the context (see
		// lazyContext) when the parent ends at the deadline by itself; or
		// when nothing ends it earlier and either the deadline is the
		// kernel-wide cap or the parent can never be cancelled (no race
		// between the deadline and a cancellation to order).
		pd, hasPD := ctx.Deadline()
		bound := hasPD && d.Equal(pd)
		if bound || (!hasPD || pd.After(d)) && (inv.DeadlineSource() == pipeline.DeadlineKernel || ctx.Done() == nil) {
			return m.runLazy(&lazyContext{parent: ctx, deadline: d, bound: bound}, inv, next, &a)
		}
	}
	return m.runDerived(ctx, inv, next, d, &a)
}

// expiredOnArrival reports whether the deadline d of inv was at or before
// its arrival. The operation's and the kernel's deadlines are set on
// arrival to now plus a positive duration, so only a caller's can be.
func expiredOnArrival(inv *pipeline.Invocation, d time.Time) bool {
	at, ok := inv.Arrival()
	if !ok {
		return !d.After(time.Now())
	}
	return inv.DeadlineSource() == pipeline.DeadlineCaller && !d.After(at)
}

// admit lets the limits decide what they can without waiting, before the
// handler's context exists: a rejection costs no context.
func (m *DeadlineMiddleware) admit(inv *pipeline.Invocation, a *admission) error {
	if m.limits == nil {
		return nil
	}
	return m.limits.admitNow(inv, a)
}

// run runs what is inside the middleware under the handler's context hctx:
// next, or the limits around next.
func (m *DeadlineMiddleware) run(hctx context.Context, inv *pipeline.Invocation, next pipeline.Handler, a *admission) (any, error) {
	return a.proceed(hctx, inv, next)
}

// runDerived runs the chain under a context derived from parent that ends
// at d. (Kept apart from Invoke, whose many returns would stop the
// compiler from open-coding the defer.)
func (m *DeadlineMiddleware) runDerived(parent context.Context, inv *pipeline.Invocation, next pipeline.Handler, d time.Time, a *admission) (any, error) {
	derive := m.derive
	if derive == nil {
		derive = context.WithDeadlineCause
	}
	hctx, cancel := derive(parent, d, ErrDeadline)
	defer cancel()
	out, err := m.run(hctx, inv, next, a)
	return attribute(hctx, out, err)
}

// runLazy is runDerived under a lazyContext.
func (m *DeadlineMiddleware) runLazy(c *lazyContext, inv *pipeline.Invocation, next pipeline.Handler, a *admission) (any, error) {
	defer c.end()
	a.lazy = c
	out, err := m.run(c, inv, next, a)
	return attribute(c, out, err)
}

// attribute returns the attributed outcome of a chain that ran under ctx
// and returned out, err. The context's state is read once.
func attribute(ctx context.Context, out any, err error) (any, error) {
	if ctx.Err() == nil {
		return out, err
	}
	e := Attribute(ctx)
	if err != nil && err != error(e) {
		return nil, e.WithCause(err)
	}
	return nil, e
}

// Original returns what the chain returned under an outcome the
// DeadlineMiddleware attributed: the cause it wrapped into a
// KERNEL_TIMEOUT_001 or KERNEL_CANCELLED_001 outcome (nil when there is
// none: the handler succeeded, or returned the attributed outcome itself),
// or err unchanged when err is no such outcome. Telemetry reports it as
// the original outcome and the kernel logs it as a straggler's own.
func Original(err error) error {
	e := pipeline.AsError(err)
	if e == nil {
		return nil
	}
	if c := e.Code(); c == pipeline.CodeTimeout || c == pipeline.CodeCanceled {
		return e.Unwrap()
	}
	return err
}

// Attribute returns the outcome of an invocation whose context ctx has
// ended: TIMEOUT (KERNEL_TIMEOUT_001) when it ended by a deadline — its
// error, or its cause, is context.DeadlineExceeded: this middleware's
// deadline or an upstream one — else CANCELLED (KERNEL_CANCELLED_001). It
// returns nil while ctx has not ended. It is the one place where TIMEOUT
// and CANCELLED are told apart; the kernel's guard uses it too.
func Attribute(ctx context.Context) *pipeline.Error {
	switch err := ctx.Err(); {
	case err == nil:
		return nil
	case err == context.DeadlineExceeded || errors.Is(context.Cause(ctx), context.DeadlineExceeded):
		return pipeline.ErrTimeout()
	}
	return pipeline.ErrCanceled()
}

// IsOwnCancellation reports whether err reports the invocation's own end
// rather than a failure of the operation: err is a TIMEOUT or CANCELLED
// outcome (ctx.Err(), a wrapped context error, or a *pipeline.Error of
// either kind) and either the invocation's context ctx has ended, or err is
// a budget exhaustion (outbound.BudgetExhaustedError) whose allotment was bounded by the invocation's
// deadline (the handler stopped early for the same reason the deadline
// would have stopped it). A TIMEOUT reported while ctx is still live — a
// downstream's 504, or a call cut by its own per-call cap — is a real
// failure and is not an own cancellation.
//
// ctx is the handler's context. IsOwnCancellation(ctx, nil) is false.
func IsOwnCancellation(ctx context.Context, err error) bool {
	if err == nil {
		return false
	}
	if k := pipeline.KindOf(err); k != pipeline.KindTimeout && k != pipeline.KindCanceled {
		return false
	}
	return ctx.Err() != nil || deadlinectx.CallerBound(err)
}
