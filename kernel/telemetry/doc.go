// Package telemetry is the public side of the kernel's OpenTelemetry
// support: what adapters, clients and handlers use.
//
// The kernel observes every invocation itself (one span, the invocation
// metrics, an optional access log); its options WithTelemetry,
// WithTracerProvider, WithMeterProvider and WithAccessLog configure that.
// The attribute and metric names are explained in docs/observability.md.
//
// This package carries the rest:
//
//   - The propagation helpers ([ExtractHTTP], [InjectHTTP], [ExtractGRPC],
//     [InjectGRPC], [Propagator]) carry the W3C trace context and baggage
//     across HTTP and gRPC hops.
//   - [Baggage] returns the extracted baggage, bounded, for the
//     invocation, where middleware reads it (see
//     [pipeline.Invocation.IdempotencyKey]).
//   - Typed handlers read the caller's idempotency key from their context
//     with [IdempotencyKey]; clients set it with [WithIdempotencyKey].
//   - An adapter describes the protocol request with [Transport], so that
//     the span and metrics carry the semantic conventions' attributes.
//   - [LogSampler] and [SampledLogger] bound the log records that callers
//     can cause at will, once per call; the adapters and the kernel use
//     them for dropped baggage and late results.
package telemetry
