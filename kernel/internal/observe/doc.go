// Package observe observes Sundial invocations with OpenTelemetry.
//
// The kernel drives it at the edge of every invocation: it gets an [Op]
// for each operation once ([Telemetry.Operation]; [Telemetry.Route] for
// host endpoints and unknown operation IDs), calls [Op.Start] when an
// invocation arrives and [Call.End] with the outcome its caller is told.
// Every response gets observed that way — early rejections and the
// TIMEOUT of a handler still running at its deadline included — so End
// sees the attributed outcome (TIMEOUT when the deadline fired, even if
// the handler then returned a cancellation), while the original outcome
// (what the circuit breaker counted) is reported beside it. For every
// invocation it
//
//   - starts one span named after the operation ID (or the route of a host
//     endpoint), with the outcome's kind and code as attributes, status
//     Error for failures, an event for a rejection (which limit, and the
//     retry hint) and an event at the instant the deadline fired;
//   - records the invocation count and duration by operation and outcome,
//     rejections by operation and reason, and the deadline budget the
//     caller sent; observable instruments report each operation's breaker
//     state, queue depths and calls in flight;
//   - optionally writes one access-log line with the same facts.
//
// The package uses the OpenTelemetry API only. With no SDK installed (the
// API's no-op default) it does no tracing or metric work at all: Start
// checks, per call and without allocating, whether a tracer provider has
// been installed and whether the instruments are enabled.
//
// It is internal to the kernel: applications turn it on and off with the
// kernel's options (WithTelemetry, WithTracerProvider, WithMeterProvider,
// WithAccessLog). What adapters and handlers use — propagation, the
// idempotency key in baggage, kernel.Transport — is in the public
// packages kernel and kernel/propagation. The attribute and metric names are constants
// here; the guide (docs/observability.md) explains each of them, and is
// their contract.
package observe
