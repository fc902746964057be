// Package pipeline defines how an invocation runs through Sundial. It
// holds the [Invocation], the [Handler] and [Middleware] that run it, and
// the [*Error] that is its outcome.
//
// # Context in, outcome out
//
// A [Handler] gets a context and an invocation. It returns a result and
// an outcome:
//
//	func(ctx context.Context, inv *pipeline.Invocation) (any, error)
//
// The context carries the invocation's cancellation and, once the kernel's
// deadline middleware has run, its deadline; pass it to every downstream
// call. The outcome is a plain Go error: nil for success, else ideally an
// [*Error]. Nothing is stored on the invocation along the way. A handler
// returns what it produced.
//
// # The invocation
//
// An [Invocation] holds the facts of one call. The kernel fixes them when
// it makes it with [NewInvocation]. They are the operation (nil for a host
// endpoint), the protocol and route, and the decoded input. They include
// the caller's deadline and the effective one with its [DeadlineSource].
// They end with the caller's baggage and idempotency key. It has no
// setters. Any goroutine may read it at any time.
//
// # The onion
//
// [Chain] composes middleware around a terminal handler once. The result
// is a single Handler that allocates nothing for the chain itself. The
// first middleware given to Chain is the outermost: it acts first on the
// invocation and last on the outcome. Here is an outer and an inner
// middleware around a handler.
//
//	outer before → inner before → handler → inner after → outer after
//
// A middleware continues the call by calling next with ctx or a context
// derived from it. It returns what next returned or an outcome of its own.
// It may also reject the invocation by not calling next at all. Stages
// order middleware coarsely (see [Stage]): the kernel sorts the built-in
// and application middleware by stage and hands the result to Chain.
// The kernel turns a handler's panic into an UNEXPECTED outcome. It wraps
// a [*PanicError].
//
// # Outcomes
//
// An [*Error] has a [Kind]. It carries a code, a message
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
