// Package grpcadapter serves Sundial operations as gRPC methods on a
// *grpc.Server. It maps outcomes to gRPC statuses.
//
// [New] builds protobuf descriptors from the Go input and output types of
// every registered operation. It builds one unary method per operation:
// orders.create is /shop.v1.Orders/Create under WithPackage("shop.v1").
// There is no .proto file and no generated code. [Adapter.Register] puts
// the methods on the application's server. [Adapter.RegisterReflection]
// makes them visible to reflection clients such as grpcurl, with every
// other service on the server.
//
// The adapter decodes and encodes; the kernel does the rest. Each call
// enters the kernel through its handle, kernel.Op.Serve. The server
// context's deadline, the caller's grpc-timeout, is the caller's deadline.
// The W3C trace context and baggage of the metadata travel on the context.
// The kernel computes the effective deadline, runs the pipeline and
// observes the call. It returns the outcome by that deadline whatever the
// handler does. A request the adapter cannot decode is handed over as a
// rejection, so it is observed too. The outcome goes back as a status
// built by [Status]. It has the code of [CodeFor] and a
// google.rpc.ErrorInfo whose reason is the outcome's stable code. It has a
// google.rpc.RetryInfo when the outcome has a retry-after. UNEXPECTED
// outcomes never carry internal text, typed nils of any type included.
// Each call writes one call log record, with the trace ID the kernel
// reports.
//
// The server interceptors serve an application's own generated services:
// [Adapter.UnaryServerInterceptor] and [Adapter.StreamServerInterceptor].
// They run each call under an operation's pipeline: its deadline, breaker
// and limits. The application's handler takes the registered one's place.
// For outbound calls, [UnaryClientInterceptor] and
// [StreamClientInterceptor] cap each call's deadline. They turn failures
// into outcomes with [FromStatus].
//
// [ServerOptions] returns the recommended bounds of the listener, to pass
// to grpc.NewServer. They bound calls per connection, metadata and message
// sizes, keepalive, idle time and age. [WithRecvTimeout] bounds the time a
// request message may take to arrive.
//
// The guide's chapter docs/grpc.md describes the naming convention, the
// Go-to-protobuf type mapping and the deadline rules in full.
package grpcadapter
