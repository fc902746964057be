package grpcadapter

// Unexported defaults and helpers that the external tests read.
const (
	DefaultMaxConcurrentStreams = defaultMaxConcurrentStreams
	DefaultDomain               = defaultDomain
	CodeUnknownMethod           = codeUnknownMethod
)

// KindFor is kindFor, the kind of a gRPC status code.
var KindFor = kindFor
