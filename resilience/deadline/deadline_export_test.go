package deadline

import (
	"context"
	"time"

	"github.com/sundial-go/sundial/pipeline"
)

// MiddlewareWithDeriveForTest returns a deadline middleware whose
// handler's context f derives, so a test can hold the deadline token back
// while the clock moves past the deadline.
func MiddlewareWithDeriveForTest(f func(parent context.Context, d time.Time, cause error) (context.Context, context.CancelFunc)) pipeline.Middleware {
	return &middleware{derive: f}
}
