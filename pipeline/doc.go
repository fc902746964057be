// Package pipeline runs invocations through ordered stages.
//
// It is the execution model every other Sundial package speaks: an
// [Invocation] is one call of an operation (or of a host endpoint), a
// [Middleware] acts on it before and after the rest of the chain, and the
// outcome of the call is a plain Go error — nil for success, or an [*Error]
// carrying a [Kind], a stable code, a message and details.
//
// Middleware is composed once, with [Chain], into a single [Handler]; calling
// that handler allocates nothing for the chain itself. The first middleware
// given to Chain is the outermost: it acts first on the invocation and last
// on the outcome.
//
// Stages order middleware coarsely (see [Stage]): the kernel sorts the
// built-in and application middleware by stage and hands the result to
// Chain.
package pipeline
