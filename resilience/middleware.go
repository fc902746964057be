package resilience

import "github.com/sundial-go/sundial/pipeline"

// NewResilienceMiddleware returns the ResilienceMiddleware of one operation,
// or nil when p configures no breaker, rate limit or concurrency limit (the
// operation then passes straight through at no cost).
//
// TODO(issue 6): breaker, fixed window and concurrency limiter.
func NewResilienceMiddleware(id string, p Policy) pipeline.Middleware {
	if !p.Limited() {
		return nil
	}
	return nil
}
