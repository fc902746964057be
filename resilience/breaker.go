package resilience

import "github.com/sundial-go/sundial/resilience/internal/breaker"

// BreakerState is the state of an operation's circuit breaker.
type BreakerState uint8

// The breaker states. An operation without a breaker is always
// BreakerClosed.
const (
	// BreakerClosed: calls pass; consecutive failures are counted.
	BreakerClosed BreakerState = iota
	// BreakerOpen: calls are rejected with KERNEL_UNAVAILABLE_004 until
	// the break is over.
	BreakerOpen
	// BreakerHalfOpen: the break is over; the next call (or the one
	// running) is the single probe that closes or re-opens the breaker.
	BreakerHalfOpen
)

// String returns "closed", "open" or "half-open".
func (s BreakerState) String() string { return breaker.State(s).String() }
