package pipeline

import (
	"sync/atomic"
	"time"
)

// Quota is what a rate limit told one invocation about its window: the
// facts behind the RateLimit-Policy and RateLimit response fields
// (draft-ietf-httpapi-ratelimit-headers-10) and their gRPC metadata.
type Quota struct {
	// Limit is the number of calls admitted per window (PermitLimit).
	Limit int
	// Window is the window's length.
	Window time.Duration
	// Remaining is the number of calls the current window still admits
	// after this one (0 when the call was turned away or queued).
	Remaining int
	// Reset is the time until the current window ends and a new one opens.
	Reset time.Duration
}

// quotaSlot holds an invocation's Quota; it is written by the limiter,
// possibly on another goroutine than the one that reads it (an answer
// given at the deadline while the call still waits in a queue), so it is
// an atomic pointer.
type quotaSlot struct{ p atomic.Pointer[Quota] }

// SetQuota records what a rate limit told the invocation about its window.
// The kernel's limiter calls it only for operations that publish their
// quota (RateLimitHeaders); the last call wins.
func (inv *Invocation) SetQuota(q Quota) {
	if inv != nil {
		inv.quota.p.Store(&q)
	}
}

// Quota returns what the invocation's rate limit recorded with SetQuota,
// and false when nothing was recorded (no rate limit, headers off, or the
// call never reached the limit).
func (inv *Invocation) Quota() (Quota, bool) {
	if inv == nil {
		return Quota{}, false
	}
	if q := inv.quota.p.Load(); q != nil {
		return *q, true
	}
	return Quota{}, false
}
