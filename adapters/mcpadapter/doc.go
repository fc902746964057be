// Package mcpadapter serves a kernel's operations as Model Context
// Protocol tools, on the official Go SDK. An agent host (any MCP client)
// lists them and calls them over Streamable HTTP or stdio.
//
// Each chosen operation is one tool: every unary operation and server
// stream by default. Client and bidi streams are no tools: one tool call
// cannot send a stream of inputs. A tool's name is the operation ID, which
// always fits MCP's tool-name grammar ([A-Za-z0-9_.-], 1 to 128
// characters): "orders.create" is the tool "orders.create". Its
// description is the operation's summary. Its inputSchema is the JSON
// Schema of the operation's input that the OpenAPI document carries, with
// the constraints of its validate tags. Its outputSchema is the schema of
// the output type, when that is an object.
//
// A tool call is one invocation through the kernel, protocol "mcp": the
// deadline, breaker, limits, priority, constraints, idempotency keys,
// baggage and trace context apply as over HTTP. The request's _meta may
// carry:
//
//	"sundial/timeoutMs"       the caller's deadline, milliseconds from arrival (a JSON integer)
//	"sundial/priority"        "critical", "default" or "sheddable"; it can only lower the class
//	"sundial/idempotency-key" the call's idempotency key
//	"traceparent", "tracestate", "baggage"  W3C trace context and baggage
//
// Over HTTP, the request's traceparent, tracestate and baggage headers
// count when _meta has none. A client's notifications/cancelled ends the
// invocation as CANCELLED; a deadline that passes ends it as TIMEOUT.
//
// A server stream's call sends each message as a progress notification,
// when the request has a progress token. Its result carries the last
// messages, their count and the outcome. The stream's send stall bounds
// a client that does not read.
//
// A failed call is a tool result with isError true. Its structuredContent
// is the Problem Details object the HTTP adapter writes (code, status,
// details.retryAfter, details.errors). Its text says the same in one
// sentence. An unknown tool, and arguments that are not a JSON object, are
// JSON-RPC errors (-32602, invalid params).
package mcpadapter
