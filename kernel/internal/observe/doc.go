// Package observe observes Sundial invocations with OpenTelemetry.
//
// The kernel drives it at the edge of every invocation. It gets an [Op] for
// each operation once ([Telemetry.Operation]). [Telemetry.Route] gives one
// for host endpoints and unknown operation IDs. The kernel calls [Op.Start]
// when an invocation arrives. It calls [Call.End] with the outcome its caller
// is told. Every response gets observed that way, early rejections included.
// So is the TIMEOUT of a handler still running at its deadline. End sees the
// attributed outcome: TIMEOUT when the deadline fired, even if the handler
// then returned a cancellation. The original outcome (what the circuit
// breaker counted) is reported beside it.
//
// For every invocation, the package does three things.
//
//   - It starts one span named after the operation ID (or the route of a host
//     endpoint). The span has the outcome's kind and code as attributes, and
//     status Error for failures. It has an event for a rejection (which
//     limit, and the retry hint). It has an event at the instant the deadline
//     fired.
//   - It records the invocation count and duration by operation and outcome.
//     It records rejections by operation and reason, and the deadline budget
//     the caller sent. Observable instruments report each operation's breaker
//     state, queue depths and calls in flight.
//   - It optionally writes one access-log line with the same facts.
//
// The package uses the OpenTelemetry API only. With no SDK installed (the
// API's no-op default), it does no tracing or metric work at all. Start
// checks, per call and without allocating, whether a tracer provider has been
// installed. It checks whether the instruments are enabled too.
//
// It is internal to the kernel. Applications turn it on and off with the
// kernel's options: WithTelemetry, WithTracerProvider, WithMeterProvider and
// WithAccessLog. What adapters and handlers use is in the public packages
// kernel and kernel/propagation: propagation, the idempotency key in
// baggage, and kernel.Transport. The attribute and metric names are
// constants here.
// The guide (docs/observability.md) explains each of them, and is their
// contract.
package observe
