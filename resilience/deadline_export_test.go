package resilience

import (
	"context"
	"time"
)

// SetDeriveForTest replaces the function that derives the handler's
// context, so a test can hold the deadline token back while the clock
// moves past the deadline.
func (m *DeadlineMiddleware) SetDeriveForTest(f func(parent context.Context, d time.Time, cause error) (context.Context, context.CancelFunc)) {
	m.derive = f
}
