package grpcadapter

// Unexported defaults and helpers that the external tests read.
const (
	DefaultMaxConcurrentStreams = defaultMaxConcurrentStreams
	DefaultDomain               = defaultDomain
	CodeUnknownMethod           = codeUnknownMethod
)

// KindFor is kindFor, the kind of a gRPC status code.
var KindFor = kindFor

// HeldStreams returns how many streams the guards of the open
// connections have held back for their pacer.
func HeldStreams() int64 {
	var n int64
	guarded.Range(func(_, v any) bool {
		n += v.(*guardedConn).nheld.Load()
		return true
	})
	return n
}
