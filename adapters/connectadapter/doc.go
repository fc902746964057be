// Package connectadapter serves Sundial operations over the Connect
// protocol, gRPC and gRPC-Web, from one http.Handler on the HTTP server.
//
// [New] builds the methods from the kernel's operations and their Go
// types, as the gRPC adapter does: with the same [WithPackage], the same
// names and the same messages, and no generated code. Each
// operation becomes one procedure of connect-go, served from dynamic
// messages: unary, server stream, client stream or bidi stream. A client
// may speak Connect with JSON or binary protobuf, gRPC, or gRPC-Web, over
// HTTP/1.1 or HTTP/2 (h2c or TLS). gRPC and bidi streams need HTTP/2.
// [Mount] puts the procedures on the application's echo instance, beside
// the REST routes of httpadapter: one port serves them all.
//
// The adapter decodes and encodes; the kernel does the rest. Each call
// enters the kernel through its handle: kernel.Op.Handle, or Op.Stream for
// a stream. A stream's outcome is its end: Connect's end-of-stream
// message, or the trailers of gRPC and gRPC-Web. The caller's
// deadline is Connect-Timeout-Ms or grpc-timeout, attributed as on gRPC
// (WithDeadlineTolerance). The idempotency key, priority, W3C trace
// context and baggage are read from the headers, as gRPC reads them from
// its metadata (WithPropagator, WithBaggageLimit). A failure is the
// status the gRPC adapter answers, as a Connect error. It has the same
// code and the same google.rpc.ErrorInfo (WithDomain), RetryInfo and
// BadRequest details.
//
// A request message is bounded after it was inflated (WithReadLimit). A
// compressed message that inflates past the bound is refused with
// resource_exhausted once the bound is reached: nothing more is inflated.
//
// An operation mounted with the GET method is free of side effects: it
// takes Connect GET requests, which browsers and CDNs can cache.
//
// CORS is off by default. WithCORS answers browsers of the given origins,
// with the header lists Connect, gRPC-Web and Sundial need. A preflight is
// answered before any operation: it never counts against a limit.
//
// The adapter is built on connectrpc.com/connect v1, not v2. The v2 line
// splits the API into new packages under a new module path. The Connect
// modules around it — the conformance suite, grpchealth, vanguard — are
// built on v1, and v1 has the dynamic-message API used here.
//
// The guide's chapter docs/connect.md tells how to reach each protocol
// with buf curl, curl and a browser.
package connectadapter
