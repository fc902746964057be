// Package httpadapter serves Sundial operations over HTTP on echo v4. It
// carries deadlines in, with the Sundial-Deadline header, and out, with a
// RoundTripper for http.Client.
//
// [Mount] puts every registered operation that has an HTTP method and path
// on an *echo.Echo the application owns. The adapter decodes and encodes;
// the kernel does the rest. A request becomes one call of
// kernel.Op.Serve. The adapter reads the caller's deadline. It
// extracts the W3C trace context and baggage into the request's context.
// It binds the body, path and query into the operation's input. Then it
// hands the call to the kernel. The kernel computes the effective deadline,
// runs the pipeline and observes the call (span, metrics, trace ID). The
// adapter writes the outcome and one JSON access log record. A success is
// the descriptor's status with a JSON body. A failure is RFC 9457 Problem
// Details (application/problem+json) with the status of [StatusFor].
//
// Some requests are turned away before the pipeline: a malformed deadline
// header, a body that does not decode or is too large, echo's 404 and 405.
// They go through the kernel too, as rejections (kernel.Op.Reject, or kernel.Kernel.Reject for no route).
// Nothing runs, but they are observed and carry a trace ID.
//
// The caller's deadline arrives as Sundial-Deadline or Sundial-Timeout-Ms.
// The first is absolute, RFC 3339 UTC, e.g. "2026-03-01T12:00:02.5Z". The
// second is relative: 1 to 12 digits of milliseconds. The response never
// waits past the deadline. Say the deadline passes, or the client goes
// away, and the handler has not returned within a few milliseconds. Then
// the kernel answers TIMEOUT (or CANCELLED) from another goroutine. The
// adapter writes the 504 (or 408) and flushes it, with Connection: close
// over HTTP/1. The handler runs on, on the request's goroutine, and keeps
// its concurrency slot until it returns. The kernel logs its late result.
// Call kernel.Kernel.Wait at shutdown to wait for such stragglers.
//
// An HTTP/1.x request with a chunked body is answered with Connection:
// close, on every route of the echo instance. Its connection is closed
// after the response. Go's server strips Content-Length from a request
// that also carries Transfer-Encoding: chunked. So the adapter cannot tell
// such a request from any other chunked one. It is a request smuggling
// vector, and RFC 9112 §6.1 requires closing the connection after it.
//
// A streaming operation's route answers SSE or NDJSON, as Accept
// chooses, and takes a WebSocket for every kind. A client stream reads an
// NDJSON body. After the first message the outcome goes in-band: an SSE
// outcome event, a last NDJSON line, a WebSocket close code. The server's
// read and write timeouts never end a stream. docs/streaming.md has the
// framing.
//
// [Transport] is the outbound half. It is an http.RoundTripper that writes
// what remains of the request context's deadline on every request. So the
// attempts, back-offs and local work of a retry loop spend one budget.
package httpadapter
