package connectadapter

import (
	"net/http"
	"time"

	"github.com/rs/cors"
)

// The request headers a browser may send: Connect's, gRPC-Web's and the
// ones Sundial reads.
var corsAllowed = []string{
	"Content-Type", "Connect-Protocol-Version", "Connect-Timeout-Ms",
	"Connect-Content-Encoding", "Connect-Accept-Encoding",
	"Grpc-Timeout", "X-Grpc-Web", "X-User-Agent",
	"Idempotency-Key", "Sundial-Priority", "Traceparent", "Tracestate", "Baggage",
}

// The response headers a browser may read: gRPC-Web's status and the
// fields Sundial answers with.
var corsExposed = []string{
	"Grpc-Status", "Grpc-Message", "Grpc-Status-Details-Bin",
	"Content-Encoding", "Connect-Content-Encoding",
	headerTraceID, "Idempotent-Replayed", "Retry-After", "RateLimit", "RateLimit-Policy",
}

// corsMaxAge is how long a browser may keep a preflight's answer.
const corsMaxAge = 2 * time.Hour

// withCORS wraps h with rs/cors for origins. A preflight is answered by
// the wrapper: it never reaches an operation.
func withCORS(h http.Handler, origins []string) http.Handler {
	return cors.New(cors.Options{
		AllowedOrigins: origins,
		AllowedMethods: []string{http.MethodGet, http.MethodPost},
		AllowedHeaders: corsAllowed,
		ExposedHeaders: corsExposed,
		MaxAge:         int(corsMaxAge / time.Second),
	}).Handler(h)
}
