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
// Every call — HTTP, gRPC, CLI or in-process — enters through one path. A
// protocol hands over what the caller sent as a [Request]. It holds the
// operation, the decoded input, the caller's deadline, baggage and the
// idempotency key. Cancellation and trace context come on the context.
// Then, once, the kernel computes the effective deadline and which bound
// binds ([pipeline.DeadlineSource]). The deadline is the earliest of the
// caller's (the request's, or the context's), now + the operation's
// TimeoutSeconds and now + MaxTimeoutSeconds. The kernel makes the
// read-only [pipeline.Invocation]. It starts its observation: a span,
// metrics, an access-log line, a trace ID. It does so for every answer, a
// call the adapter turned away before the pipeline ([Request.Reject])
// included. Last, it runs the operation's chain and returns the [Outcome].
//
// Both [Kernel.Invoke] and [Call] run the chain on the caller's goroutine.
// The methods [Kernel.Serve] (HTTP) and [Kernel.Handle] (gRPC,
// the CLI) also guarantee that the answer leaves at the deadline, whatever
// the handler does. A handler that ignores its context keeps running, and
// keeps its concurrency slot. Meanwhile the caller gets TIMEOUT (CANCELLED
// when the caller went away). The late result is logged once, with the
// trace ID. The method [Kernel.Wait] waits for such stragglers at shutdown.
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
