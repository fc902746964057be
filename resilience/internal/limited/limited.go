// Package limited is the rejection the limiters of package resilience and
// the shared ones of resilience/cluster return: ErrLimited, or an Error
// that matches it and says when to retry.
package limited

import (
	"errors"
	"fmt"
	"time"

	"github.com/sundial-go/sundial/pipeline"
)

// ErrLimited is resilience.ErrLimited.
var ErrLimited = errors.New("resilience: limit reached")

// Error is a rate limit's rejection with the time until the call could be
// admitted and what the window looked like. It matches [ErrLimited] with
// errors.Is.
type Error struct {
	RetryAfter time.Duration
	Quota      pipeline.Quota
}

func (e *Error) Error() string {
	return fmt.Sprintf("resilience: limit reached; retry after %v", e.RetryAfter)
}

// Unwrap returns ErrLimited.
func (e *Error) Unwrap() error { return ErrLimited }
