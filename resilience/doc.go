// Package resilience bounds every invocation in time and protects each
// operation from overload.
//
// [deadline.Middleware] is the first built-in of the Resilience stage: it
// derives the handler's context from the invocation's effective deadline
// (computed once by the kernel), cancels everything below it when the
// deadline fires, and attributes the outcome truthfully — TIMEOUT when the
// deadline ended the handler's context, CANCELLED when the caller gave up
// first ([Attribute] is that decision, for whoever else needs it).
//
// The [Limits] sits right inside it and applies one circuit
// breaker, one fixed-window rate limiter and one concurrency limiter per
// operation ID, configured by a [Policy] (the kernel reads it from the
// configuration). [Budget] splits what remains of a deadline across
// outbound calls.
//
// The package knows nothing of HTTP, gRPC, the CLI or the configuration.
package resilience
