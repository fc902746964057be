// Package propagation carries the W3C trace context and baggage across
// HTTP and gRPC hops. Adapters, clients and handlers use it.
//
// The kernel observes every invocation itself: one span, the invocation
// metrics and an optional access log. Its options WithTelemetry,
// WithTracerProvider, WithMeterProvider and WithAccessLog configure that.
// docs/observability.md explains the attribute and metric names.
//
// This package carries the rest:
//
//   - [ExtractHTTP], [InjectHTTP], [ExtractGRPC], [InjectGRPC] and
//     [Propagator] carry the trace context and baggage.
//   - [Baggage] returns the extracted baggage, bounded, for the
//     invocation. Middleware reads it there (see
//     [pipeline.Invocation.IdempotencyKey]).
//   - Typed handlers read the caller's idempotency key with
//     [IdempotencyKey]. Clients set it with [WithIdempotencyKey].
//   - [WithPriority] passes a lowered priority class on to later hops.
package propagation
