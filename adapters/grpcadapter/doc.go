// Package grpcadapter serves Sundial operations as gRPC methods on a
// *grpc.Server and maps outcomes to gRPC statuses.
//
// [New] builds, from the Go input and output types of every registered
// operation, protobuf descriptors and one unary method per operation —
// orders.create is /shop.v1.Orders/Create under WithPackage("shop.v1") —
// with no .proto file and no generated code. [Adapter.Register] puts them
// on the application's server; [Adapter.RegisterReflection] makes them
// (and every other service on the server) visible to reflection clients
// such as grpcurl.
//
// The adapter decodes and encodes; the kernel does the rest. Each call
// enters the kernel through its handle (kernel.Op.Serve): the server
// context's deadline (the caller's grpc-timeout) is the caller's deadline,
// the W3C trace context and baggage of the metadata travel on the context,
// and the kernel computes the effective deadline, runs the pipeline,
// observes the call and returns the outcome by that deadline whatever the
// handler does. A request the adapter cannot decode is handed over as a
// rejection, so it is observed too. The outcome goes back as a status
// built by [Status]: the code of [CodeFor], a google.rpc.ErrorInfo whose
// reason is the outcome's stable code, and a google.rpc.RetryInfo when the
// outcome has a retry-after. UNEXPECTED outcomes — typed nils of any type
// included — never carry internal text. Each call writes one call log
// record, with the trace ID the kernel reports.
//
// For an application's own generated services, the server interceptors
// ([Adapter.UnaryServerInterceptor], [Adapter.StreamServerInterceptor])
// run each call under an operation's pipeline — its deadline, breaker and
// limits — with the application's handler in place of the registered one.
// For outbound calls, [UnaryClientInterceptor] and
// [StreamClientInterceptor] cap each call's deadline and turn failures into
// outcomes with [FromStatus].
//
// [ServerOptions] returns the recommended bounds of the listener — calls per
// connection, metadata and message sizes, keepalive, idle and age limits —
// to pass to grpc.NewServer; [WithRecvTimeout] bounds the time a request
// message may take to arrive.
//
// The guide's chapter docs/grpc.md describes the naming convention, the
// Go-to-protobuf type mapping and the deadline rules in full.
package grpcadapter
