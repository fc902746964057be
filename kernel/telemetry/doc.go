// Package telemetry is the public side of the kernel's OpenTelemetry
// support: what adapters, clients and handlers use.
//
// The kernel observes every invocation itself: one span, the invocation
// metrics and an optional access log. Its options WithTelemetry,
// WithTracerProvider, WithMeterProvider and WithAccessLog configure that.
// The attribute and metric names are explained in docs/observability.md.
//
// This package carries the rest.
//
//   - The propagation helpers carry the W3C trace context and baggage
//     across HTTP and gRPC hops. They are [ExtractHTTP], [InjectHTTP],
//     [ExtractGRPC], [InjectGRPC] and [Propagator].
//   - [Baggage] returns the extracted baggage, bounded, for the
//     invocation. Middleware reads it there (see
//     [pipeline.Invocation.IdempotencyKey]).
//   - Typed handlers read the caller's idempotency key with
//     [IdempotencyKey]. Clients set it with [WithIdempotencyKey].
//   - An adapter describes the protocol request with [Transport]. The
//     span and metrics then carry the semantic conventions' attributes.
//   - [LogSampler] and [SampledLogger] bound the log records that callers
//     can cause at will, once per call. The adapters and the kernel use
//     them for dropped baggage and late results.
package telemetry
