// Package ratelimit renders an invocation's quota as the RateLimit-Policy
// and RateLimit fields of draft-ietf-httpapi-ratelimit-headers-10
// (experimental: the draft may still change, and these fields with it).
// The fixed window puts them in the invocation's Reply, which the HTTP
// adapter sends as headers and the gRPC adapter as header metadata.
package ratelimit

import (
	"strconv"
	"time"

	"github.com/sundial-go/sundial/pipeline"
)

// Field names (lower-case, as gRPC metadata keys must be; HTTP header
// names are case-insensitive).
const (
	PolicyField = "ratelimit-policy"
	Field       = "ratelimit"
)

// Draft is the version of the draft the fields follow.
const Draft = "draft-ietf-httpapi-ratelimit-headers-10"

// PolicyName names the one quota policy of an operation.
const PolicyName = "default"

// Policy renders q's policy: `"default";q=<limit>;w=<window seconds>`.
func Policy(q pipeline.Quota) string {
	return `"` + PolicyName + `";q=` + strconv.Itoa(q.Limit) + ";w=" + strconv.FormatInt(seconds(q.Window), 10)
}

// Set puts q's two fields in the reply r, and q itself (Reply.Quota).
func Set(r *pipeline.Reply, q pipeline.Quota) {
	r.SetQuota(q)
	r.Set(PolicyField, Policy(q))
	r.Set(Field, Current(q))
}

// Current renders q's state: `"default";r=<remaining>;t=<seconds to reset>`.
// t is rounded up, as a Retry-After is: a client that waits t seconds
// finds the new window open.
func Current(q pipeline.Quota) string {
	return `"` + PolicyName + `";r=` + strconv.Itoa(max(q.Remaining, 0)) + ";t=" + strconv.FormatInt(seconds(q.Reset), 10)
}

// seconds is d rounded up to whole seconds (a window of 0.5 s is w=1).
func seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}
