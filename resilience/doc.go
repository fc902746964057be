// Package resilience bounds every invocation in time and protects each
// operation from overload.
//
// [DeadlineMiddleware] is the first built-in of the Resilience stage: it
// derives the handler's context from the invocation's absolute deadline,
// cancels everything below it when the deadline fires, and attributes the
// outcome truthfully — TIMEOUT when the deadline token fired, CANCELLED when
// the caller gave up first.
//
// The ResilienceMiddleware sits right inside it and applies one circuit
// breaker, one fixed-window rate limiter and one concurrency limiter per
// operation ID, configured by a [Policy] (see [ParseOptions] for the JSON
// keys). Budget splits what remains of a deadline across outbound calls.
//
// The package knows nothing of HTTP, gRPC or the CLI.
package resilience
