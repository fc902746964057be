// Package kernel builds the Sundial pipeline and runs invocations through
// it.
//
// A [Kernel] is built once, with [New], from an operations registry,
// configuration and application middleware registered with [UseAt]. The
// configuration is JSON, optionally overridden from the environment, read
// with koanf. New validates everything and compiles one middleware chain
// per operation. The hot path has nothing left to validate or allocate for
// the chain.
//
// # The edge
//
// Every call — HTTP, gRPC, CLI or in-process — enters through one path.
// An adapter takes one [Op] per operation from [Kernel.Operations] when it
// mounts its routes. Per call it hands over a [Unary]: the [Caller] and
// the decoded input. Cancellation and trace context travel on the context.
// The kernel then, once:
//
//   - computes the effective deadline, the earliest of the caller's (the
//     request's, or the context's), now + the operation's TimeoutSeconds
//     and now + MaxTimeoutSeconds, and which of them binds
//     ([pipeline.DeadlineSource]);
//   - makes the read-only [pipeline.Invocation];
//   - starts its observation (a span, metrics, an access-log line, a
//     trace ID) — for every answer, a call the adapter
//     turned away before the pipeline ([Op.Reject]) included;
//   - runs the operation's chain and returns the [Outcome].
//
// [Op.Invoke] (and [Call]) run the chain on the caller's goroutine.
// [Op.Serve] (HTTP) and [Op.Handle] (gRPC, the CLI) also guarantee
// that the answer leaves at the deadline whatever the handler does: a
// handler that ignores its context keeps running — and keeps its
// concurrency slot — while the caller gets TIMEOUT (CANCELLED when the
// caller went away); its late result is logged once, with the trace ID.
// [Kernel.Wait] waits for such stragglers at shutdown.
//
// # The chain
//
// Outermost first, an operation's chain runs application Diagnostics
// middleware. Then comes the DeadlineMiddleware, with the operation's
// Limits (breaker, rate limit, concurrency limit) inside it. Setting
// Sundial.Kernel.UseBuiltInMiddleware to false leaves both out. Then
// comes application Resilience middleware, which already runs under the
// deadline. Authentication, Tenant and Authorization middleware follow.
// Then come the built-in input validation and application Validation
// middleware. Handle middleware comes last, and then the operation's
// handler.
//
// A panic in the handler is an UNEXPECTED outcome every middleware sees. A
// panic in a middleware is recovered at the edge.
//
// # Reloading
//
// The method [Kernel.Reload] reads and validates the configuration again.
// It applies it at once, or not at all. The method [Kernel.WatchConfig]
// reloads whenever the config file changes. Each operation's limits are
// changed in place, keeping their windows, queues, slots and breaker state
// (see docs/resilience.md, "Changing limits at run time").
package kernel
