package pipeline

import (
	"strconv"
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

// The names of the fields a Reply renders its Quota as (lower-case, as
// gRPC metadata keys must be; HTTP header names are case-insensitive).
const (
	fieldRateLimitPolicy = "ratelimit-policy"
	fieldRateLimit       = "ratelimit"
)

// quotaPolicyName names the one quota policy of an operation.
const quotaPolicyName = "default"

// renderPolicy renders q's policy: `"default";q=<limit>;w=<window seconds>`.
func renderPolicy(q Quota) string {
	return `"` + quotaPolicyName + `";q=` + strconv.Itoa(q.Limit) + ";w=" + strconv.FormatInt(ceilSeconds(q.Window), 10)
}

// renderRemaining renders q's state: `"default";r=<remaining>;t=<seconds
// to reset>`. t is rounded up, as a Retry-After is: a client that waits t
// seconds finds the new window open.
func renderRemaining(q Quota) string {
	return `"` + quotaPolicyName + `";r=` + strconv.Itoa(max(q.Remaining, 0)) + ";t=" + strconv.FormatInt(ceilSeconds(q.Reset), 10)
}

// ceilSeconds is d rounded up to whole seconds (a window of 0.5 s is w=1).
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}
