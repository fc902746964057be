// Package kernel builds the Sundial pipeline and runs invocations through
// it.
//
// A [Kernel] is built once, with [New], from an operations registry,
// configuration (JSON, optionally overridden from the environment, read
// with koanf) and application middleware registered with [UseAt]. New
// validates everything and compiles one middleware chain per operation; the
// hot path ([Kernel.Invoke]) has nothing left to validate or allocate for
// the chain.
//
// The chain of an operation is, outermost first: the built-in
// Diagnostics middleware, application Diagnostics middleware, the
// DeadlineMiddleware and ResilienceMiddleware (unless
// Sundial.Kernel.UseBuiltInMiddleware is false), application Resilience
// middleware, Authentication, Tenant and Authorization middleware, the
// built-in input validation, application Validation and Handle
// middleware, and finally the operation's handler.
package kernel
