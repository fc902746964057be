package outbound

import (
	"sync"
	"time"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience/internal/breaker"
)

// CodeDependencyThrottled is the code of the UNAVAILABLE outcome of a call
// or a retry that a dependency's adaptive throttle refused locally. Nothing
// was sent. Its retry-after is one bucket of the throttle's window.
const CodeDependencyThrottled = "KERNEL_UNAVAILABLE_010"

// throttleBuckets is how many buckets a throttle's window has.
const throttleBuckets = 20

// throttle is a dependency's adaptive throttle (the SRE book's client-side
// throttling). It counts, over a sliding window of throttleBuckets buckets,
// the attempts the dependency judged (requests) and those it accepted. A
// call is refused locally with probability
// max(0, (requests − K·accepts) / (requests + 1)). Attempts with a neutral
// verdict, and calls refused locally, are not counted.
type throttle struct {
	mu       sync.Mutex
	base     time.Time     // the start of bucket 0
	width    time.Duration // of one bucket
	newest   int64         // index of the newest bucket
	req, acc [throttleBuckets]int64
	reqs     int64 // sum of req
	accs     int64 // sum of acc
}

func newThrottle(window time.Duration) *throttle {
	return &throttle{base: time.Now(), width: max(window/throttleBuckets, 1)}
}

// carry returns t when the window is the same (so the counts stay), or a
// new throttle for window.
func (t *throttle) carry(window time.Duration) *throttle {
	if t != nil && t.width == max(window/throttleBuckets, 1) {
		return t
	}
	return newThrottle(window)
}

// roll makes the bucket of now the newest, emptying those that left the
// window. The caller holds t.mu.
func (t *throttle) roll(now time.Time) int {
	i := int64(now.Sub(t.base) / t.width)
	for n := 0; t.newest < i && n < throttleBuckets; n++ {
		t.newest++
		b := t.newest % throttleBuckets
		t.reqs -= t.req[b]
		t.accs -= t.acc[b]
		t.req[b], t.acc[b] = 0, 0
	}
	t.newest = max(t.newest, i)
	return int(t.newest % throttleBuckets)
}

// record counts an attempt that ended with verdict v.
func (t *throttle) record(v breaker.Result) {
	if v == breaker.Neutral {
		return
	}
	t.mu.Lock()
	b := t.roll(time.Now())
	t.req[b]++
	t.reqs++
	if v == breaker.Success {
		t.acc[b]++
		t.accs++
	}
	t.mu.Unlock()
}

// window returns the window's requests and accepts and the probability of
// refusing a call now under k.
func (t *throttle) window(k float64) (reqs, accs int64, p float64) {
	t.mu.Lock()
	t.roll(time.Now())
	reqs, accs = t.reqs, t.accs
	t.mu.Unlock()
	return reqs, accs, max(0, (float64(reqs)-k*float64(accs))/float64(reqs+1))
}

// throttled returns the outcome of an attempt the throttle refuses, or
// nil. It draws a number from d.coin only when the probability is above 0.
func (c *call) throttled() error {
	t := c.s.throttle
	if t == nil {
		return nil
	}
	if _, _, p := t.window(c.s.p.ThrottleK); p == 0 || c.d.coin() >= p {
		return nil
	}
	c.d.count.throttled.Add(1)
	return pipeline.NewError(pipeline.KindUnavailable, CodeDependencyThrottled,
		"The dependency '"+c.d.name+"' is throttled: it accepted too few recent calls.").
		WithDetail("dependency", c.d.name).WithRetryAfter(t.width)
}
