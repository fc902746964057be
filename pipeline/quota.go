package pipeline

import "time"

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
