package telemetry

// Transport describes the protocol request of one invocation in the terms
// of the OpenTelemetry semantic conventions for HTTP and RPC servers. An
// adapter fills it in (kernel.Request.Transport); the invocation's span
// and the conventions' duration metric then carry the standard
// attributes. The zero Transport records none of them.
type Transport struct {
	// HTTP: the request method as received and the matched route template
	// ("" when no route matched). The URL scheme ("http" or "https") and
	// the URL path. The Host the client addressed and the protocol version
	// ("1.1", "2").
	Method, Route, Scheme, Path, Host, ProtocolVersion string
	// RPC: the full gRPC method name ("/shop.v1.Billing/Charge"), and
	// whether the server knows it. When it does not, rpc.method is _OTHER
	// and rpc.method_original has the name.
	RPCMethod  string
	RPCUnknown bool
	// Status returns the protocol status the outcome err is answered with:
	// the HTTP status code, or the gRPC code. A nil err is a success. A nil
	// Status gives 200 or OK for success, 500 or INTERNAL (13) for a failure.
	Status func(err error) int
}
