package grpcadapter

import rstream "github.com/sundial-go/sundial/resilience/stream"

// Unexported defaults and helpers that the external tests read.
const (
	DefaultMaxConcurrentStreams = defaultMaxConcurrentStreams
	DefaultDomain               = defaultDomain
	CodeUnknownMethod           = codeUnknownMethod
)

// KindFor is kindFor, the kind of a gRPC status code.
var KindFor = kindFor

// SetStreamConfig sets the clocks and bounds of every stream the
// adapters serve until restore is called.
func SetStreamConfig(c rstream.Config) (restore func()) {
	old := interimConfig
	interimConfig = c
	return func() { interimConfig = old }
}

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
