// Package httpadapter serves Sundial operations over HTTP on echo v4 and
// carries deadlines in (the Sundial-Deadline header) and out (a
// RoundTripper for http.Client).
//
// [Mount] puts every registered operation that has an HTTP method and path
// on an *echo.Echo the application owns. A request becomes one invocation:
// the adapter reads the caller's deadline, reads and binds the body, path
// and query into the operation's input, runs the kernel's pipeline, and
// writes the outcome — the descriptor's success status with a JSON body,
// or RFC 9457 Problem Details (application/problem+json) whose status
// comes from [StatusFor]. Each request leaves one JSON access log record.
//
// The caller's deadline arrives as Sundial-Deadline (absolute, RFC 3339
// UTC) or Sundial-Timeout-Ms (relative, milliseconds); see [ParseDeadline]
// and [ParseTimeoutMs]. The response never waits past the deadline: when
// an invocation's deadline fires before it returns, a context.AfterFunc
// callback writes the 504 (after a 5 ms grace for a handler that honours
// its context) while a handler that ignores its context runs on, on the
// request's goroutine, keeping its concurrency slot, until it returns; its
// late result is discarded and logged.
//
// [Transport] is the outbound half: an http.RoundTripper that writes what
// remains of the request context's deadline on every request, so that the
// attempts, back-offs and local work of a retry loop all spend one budget.
package httpadapter
