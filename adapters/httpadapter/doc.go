// Package httpadapter serves Sundial operations over HTTP on echo v4 and
// carries deadlines in (the Sundial-Deadline header) and out (a
// RoundTripper for http.Client).
//
// [Mount] puts every registered operation that has an HTTP method and path
// on an *echo.Echo the application owns. The adapter decodes and encodes;
// the kernel does the rest. A request becomes one call of
// kernel.Op.Serve: the adapter reads the caller's deadline, extracts
// the W3C trace context and baggage into the request's context, reads and
// binds the body, path and query into the operation's input, and hands the
// call to the kernel, which computes the effective deadline, runs the
// pipeline and observes the call (span, metrics, trace ID). The adapter
// then writes the outcome — the descriptor's success status with a JSON
// body, or RFC 9457 Problem Details (application/problem+json) whose
// status comes from [StatusFor] — and one JSON access log record.
//
// Requests the adapter turns away before the pipeline — a malformed
// deadline header, a body that does not decode or is too large, echo's
// 404 and 405 — go through the kernel too, as rejections
// (kernel.Op.Reject): nothing runs, but they are observed and carry a
// trace ID like every other response.
//
// The caller's deadline arrives as Sundial-Deadline (absolute, RFC 3339
// UTC, e.g. "2026-03-01T12:00:02.5Z") or Sundial-Timeout-Ms (relative, 1 to
// 12 digits of milliseconds). The response never waits past the deadline: when
// the invocation's deadline passes (or the client goes away) and its
// handler has not returned within a few milliseconds, the kernel answers
// TIMEOUT (CANCELLED) from another goroutine, and the adapter writes the
// 504 (408) with Connection: close over HTTP/1 and flushes it, while the
// handler runs on, on the request's goroutine, keeping its concurrency
// slot, until it returns; the kernel logs its late result. Call
// kernel.Kernel.Wait at shutdown to wait for such stragglers.
//
// An HTTP/1.x request with a chunked body is answered with Connection:
// close, on every route of the echo instance, and its connection is closed
// after the response: Go's server strips Content-Length from a request that
// also carries Transfer-Encoding: chunked, so the adapter cannot tell such
// a request — a request smuggling vector that RFC 9112 §6.1 requires
// closing the connection after — from any other chunked one.
//
// [Transport] is the outbound half: an http.RoundTripper that writes what
// remains of the request context's deadline on every request, so that the
// attempts, back-offs and local work of a retry loop all spend one budget.
package httpadapter
