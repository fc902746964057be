// Package resilience protects each operation from overload.
//
// [Limits] is the built-in middleware of the Resilience stage. It runs the
// invocation's deadline (package deadline) and, inside it, the operation's
// limits. Each operation gets one circuit breaker, one fixed-window rate
// limiter and one concurrency limiter, configured by a [Policy]. The
// kernel reads the policy from the configuration. A limit of your own is
// a [Limit].
//
// The primitives behind the limits are public too: [FixedWindow],
// [KeyedFixedWindow] and [ConcurrencyLimiter].
//
// The package knows nothing of HTTP, gRPC, the CLI or the configuration.
package resilience
