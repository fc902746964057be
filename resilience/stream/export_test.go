package stream

import (
	"math"
	"time"
)

// Armed returns when the timer of s fires next, as a time since s opened.
// It reports false when the timer is not armed.
func Armed(s *Stream) (time.Duration, bool) {
	at := s.armed.Load()
	return time.Duration(at), at != math.MaxInt64
}
