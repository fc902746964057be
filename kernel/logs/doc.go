// Package logs bounds and routes the log records that callers and
// exporters cause at will.
//
// A [Sampler] bounds the records of one kind of event that a caller can
// cause once per call: bad input, a cancelled call, a late result.
// [Sampled] wraps a logger with one. The kernel and the adapters use it.
// [OTelErrors] sends OpenTelemetry's own errors to a slog logger.
package logs
