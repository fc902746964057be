// Package pipeline defines how an invocation runs through Sundial: the
// [Invocation], the [Handler] and [Middleware] that run it, and the
// [*Error] that is its outcome.
//
// # Context in, outcome out
//
// A [Handler] is called with a context and an invocation and returns a
// result and an outcome:
//
//	func(ctx context.Context, inv *pipeline.Invocation) (any, error)
//
// The context carries the invocation's cancellation and, once the kernel's
// deadline middleware has run, its deadline; pass it to every downstream
// call. The outcome is a plain Go error: nil for success, else ideally an
// [*Error]. Nothing is stored on the invocation along the way: what a
// handler produced is what it returns.
//
// # The invocation
//
// An [Invocation] holds the facts of one call, fixed when the kernel makes
// it with [NewInvocation]: the operation (nil for a host endpoint), the
// protocol and route it came through, the decoded input, the caller's
// deadline and the effective one with its [DeadlineSource], the caller's
// baggage and idempotency key. It has no setters, so middleware and
// handlers on any goroutine may read it at any time.
//
// # The onion
//
// [Chain] composes middleware around a terminal handler once, into a single
// Handler; calling that handler allocates nothing for the chain itself. The
// first middleware given to Chain is the outermost: it acts first on the
// invocation and last on the outcome. Given an outer and an inner
// middleware, a call runs
//
//	outer before → inner before → handler → inner after → outer after
//
// A middleware continues the call by calling next, with ctx or a context
// derived from it, and returns what next returned or an outcome of its own;
// it may also reject the invocation by not calling next at all. Stages
// order middleware coarsely (see [Stage]): the kernel sorts the built-in
// and application middleware by stage and hands the result to Chain.
// The kernel turns a handler's panic into an UNEXPECTED outcome that
// wraps a [*PanicError].
//
// # Outcomes
//
// An [*Error] carries a [Kind] from a closed set, a stable code, a message
// that may reach the caller, details, an optional retry-after and an
// optional cause that never reaches the caller. Errors are immutable:
// [Error.WithDetail] and [Error.WithRetryAfter] return
// changed copies and [Error.Details] returns a copy, so one Error, such as
// [ErrTimeout], may be shared freely. An UNEXPECTED error shows a caller
// nothing but [UnexpectedMessage].
//
// [AsError] classifies any error. It returns the *Error in the error's
// chain when there is one. A context error gives TIMEOUT or CANCELLED.
// Anything else is UNEXPECTED, nil pointers of any error type included.
// [ErrorText] returns an error's text without ever panicking; use it to
// log errors that come from application code.
//
// Package pipeline/pipelinetest helps test middleware and handlers.
package pipeline
