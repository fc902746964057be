// Package deadline bounds every invocation in time and says truthfully
// how it ended.
//
// [Middleware] runs the rest of the chain under a context that ends at
// the invocation's effective deadline. The kernel computes that deadline
// once, on arrival. Every downstream call made with the context is bounded
// by it. The handler's context ends at the deadline even when the handler
// ignores it.
//
// When the chain returns, [Attribute] reads the handler's context alone,
// never the clock. A context ended by a deadline gives TIMEOUT
// (KERNEL_TIMEOUT_001). A context ended otherwise gives CANCELLED
// (KERNEL_CANCELLED_001). A live context leaves the chain's outcome as it
// is. [Original] gives back what the chain itself returned.
//
// The kernel runs this middleware with the operation's limits inside it,
// as one middleware: see resilience.Limits. The rules, the ties and the
// costs are in docs/deadlines.md.
package deadline

import (
	"context"
	"time"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience/internal/deadlinectx"
)

// ErrDeadline is the cause recorded on a handler's context when the
// invocation's deadline fires. It wraps context.DeadlineExceeded, so
// errors.Is(err, context.DeadlineExceeded) holds for it. http.Client
// returns context.Cause(ctx) as its error, and grpc-go maps a cause that
// wraps neither DeadlineExceeded nor Canceled to Unknown. Both still see
// a deadline. Like context.DeadlineExceeded, it reports Timeout true.
var ErrDeadline error = deadlinectx.ErrDeadline

// Middleware returns the deadline middleware, the first built-in of the
// Resilience stage. It keeps no per-call state and is safe for concurrent
// use.
//
// It runs the rest of the chain under a context derived from its own that
// ends at [pipeline.Invocation.Deadline], with cause [ErrDeadline]. An
// invocation without a deadline runs under the context it was given.
//
// On arrival it decides whether to start at all. A deadline at or before
// the arrival ends the call with TIMEOUT. A caller already gone ends it
// with CANCELLED, or TIMEOUT when its context ended by a deadline. Just
// before the handler would start, the clock is read once more: a deadline
// that has passed by then ends the call with TIMEOUT, and nothing inside
// runs.
//
// When the call ends, the outcome is attributed as [Attribute] says. What
// the chain returned, when it differs, becomes the cause of that outcome
// ([Original]). It never reaches a caller.
func Middleware() pipeline.Middleware { return &middleware{} }

// middleware is the deadline middleware. derive creates the handler's
// context; nil makes a lazy one when it can (see deadlinectx.Enter).
// Tests set it to hold the deadline back while the clock moves on.
type middleware struct {
	derive deadlinectx.Derive
}

// Invoke implements pipeline.Middleware.
func (m *middleware) Invoke(ctx context.Context, inv *pipeline.Invocation, next pipeline.Handler) (any, error) {
	d, ok, err := deadlinectx.Arrive(ctx, inv)
	if err != nil {
		return nil, err
	}
	if !ok {
		// No deadline anywhere: only the caller can end the call.
		out, err := run(ctx, inv, next)
		return deadlinectx.Result(ctx, out, err)
	}
	return m.under(ctx, inv, next, d)
}

// under runs the chain under a context derived from parent that ends at
// d. It is kept apart from Invoke, whose many returns would stop the
// compiler from open-coding the defer.
func (m *middleware) under(parent context.Context, inv *pipeline.Invocation, next pipeline.Handler, d time.Time) (any, error) {
	s := deadlinectx.Enter(parent, inv, d, m.derive)
	defer s.End()
	out, err := run(s.Ctx, inv, next)
	return deadlinectx.Result(s.Ctx, out, err)
}

// run runs next, unless the deadline of inv has passed already.
func run(ctx context.Context, inv *pipeline.Invocation, next pipeline.Handler) (any, error) {
	if deadlinectx.TooLate(inv) {
		return nil, pipeline.ErrTimeout()
	}
	return next(ctx, inv)
}

// Attribute returns the outcome of an invocation whose context ctx has
// ended. It is TIMEOUT (KERNEL_TIMEOUT_001) when ctx ended by a deadline:
// its error, or its cause, is context.DeadlineExceeded. That deadline may
// be the invocation's or an upstream one. Otherwise it is CANCELLED
// (KERNEL_CANCELLED_001). Attribute returns nil while ctx has not ended.
// It is the one place where TIMEOUT and CANCELLED are told apart.
func Attribute(ctx context.Context) *pipeline.Error { return deadlinectx.Attribute(ctx) }

// Original returns what the chain returned under an outcome the deadline
// attributed. That is the cause wrapped into a KERNEL_TIMEOUT_001 or
// KERNEL_CANCELLED_001 outcome, or nil when there is none. For any other
// err, Original returns err unchanged. Telemetry reports it as the
// original outcome, and the kernel logs it as a straggler's own.
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

// IsOwnCancellation reports whether err reports the invocation's own end
// rather than a failure of the operation. err must be a TIMEOUT or
// CANCELLED outcome: ctx.Err(), a wrapped context error, or a
// *pipeline.Error of either kind. Then either ctx has ended, or err is a
// budget's exhaustion bounded by the invocation's deadline
// (outbound.BudgetExhaustedError). A TIMEOUT reported while ctx is live,
// such as a downstream's 504, is a real failure.
//
// ctx is the handler's context. IsOwnCancellation(ctx, nil) is false.
func IsOwnCancellation(ctx context.Context, err error) bool {
	if err == nil {
		return false
	}
	if k := pipeline.AsError(err).Kind(); k != pipeline.KindTimeout && k != pipeline.KindCanceled {
		return false
	}
	return ctx.Err() != nil || deadlinectx.CallerBound(err)
}
