package resilience

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/sundial-go/sundial/pipeline"
)

// The codes of the built-in limits' rejections, all UNAVAILABLE.
const (
	CodeRateLimited        = "KERNEL_UNAVAILABLE_002" // a rate limit turned the call away
	CodeConcurrencyLimited = "KERNEL_UNAVAILABLE_003" // a concurrency limit turned it away
	CodeCircuitOpen        = "KERNEL_UNAVAILABLE_004" // the breaker is open
	CodeShed               = "KERNEL_UNAVAILABLE_008" // a full limit shed it for its class
)

// codeIdempotencyStore is idempotency.CodeStore: the breaker counts an
// idempotency store's failure as neutral.
const codeIdempotencyStore = "KERNEL_UNAVAILABLE_006"

// Rejections counts the calls each built-in limit turned away (or, in
// shadow mode, would have) since the process started. Shed counts the
// calls the concurrency limit shed for their class
// (KERNEL_UNAVAILABLE_008); Concurrency the others it turned away.
type Rejections struct {
	Rate, Concurrency, Breaker, Shed int64
}

// RateLimited returns the outcome of a call turned away by a rate limit:
// UNAVAILABLE, KERNEL_UNAVAILABLE_002, detail "id" (the operation ID) and
// a retry-after of retryAfter rounded up to whole seconds (at least 1),
// e.g. "Operation 'orders.create' is rate limited; retry after 60
// seconds.". The breaker does not count it.
func RateLimited(id string, retryAfter time.Duration) *pipeline.Error {
	n := retrySeconds(retryAfter)
	return rejection(CodeRateLimited, id, n,
		fmt.Sprintf("Operation '%s' is rate limited; retry after %s.", id, seconds(n)))
}

// CircuitOpen returns the outcome of a call turned away by an open circuit
// breaker: UNAVAILABLE, KERNEL_UNAVAILABLE_004, detail "id" and a
// retry-after of retryAfter (the time until the breaker half-opens)
// rounded up to whole seconds (at least 1).
func CircuitOpen(id string, retryAfter time.Duration) *pipeline.Error {
	n := retrySeconds(retryAfter)
	return rejection(CodeCircuitOpen, id, n,
		fmt.Sprintf("Operation '%s' is unavailable: its circuit breaker is open; retry after %s.", id, seconds(n)))
}

// ConcurrencyLimited returns the outcome of a call turned away by a
// concurrency limit: UNAVAILABLE, KERNEL_UNAVAILABLE_003, detail "id".
// The breaker does not count it.
func ConcurrencyLimited(id string) *pipeline.Error {
	return pipeline.NewError(pipeline.KindUnavailable, CodeConcurrencyLimited,
		fmt.Sprintf("Operation '%s' has too many calls in progress; retry later.", id)).
		WithDetail("id", id)
}

// shedRetryAfter is the retry-after of a shed call: nobody knows when a
// running call will end, and 1 second is the least a Retry-After can say.
const shedRetryAfter = time.Second

// Shed returns the outcome of a call of class p that a full concurrency
// limit turned away, or evicted from its queue, in favour of calls of a
// higher class: UNAVAILABLE, KERNEL_UNAVAILABLE_008, details "id" and
// "priority" (p's name) and a retry-after of retryAfter rounded up to
// whole seconds (at least 1), e.g. "Operation 'orders.create' is shedding
// sheddable calls under load; retry after 1 second.". The breaker does not
// count it.
func Shed(id string, p pipeline.Priority, retryAfter time.Duration) *pipeline.Error {
	n := retrySeconds(retryAfter)
	return rejection(CodeShed, id, n,
		fmt.Sprintf("Operation '%s' is shedding %s calls under load; retry after %s.", id, p, seconds(n))).
		WithDetail("priority", p.String())
}

func rejection(code, id string, retryAfter int64, msg string) *pipeline.Error {
	return pipeline.NewError(pipeline.KindUnavailable, code, msg).
		WithDetail("id", id).
		WithRetryAfter(time.Duration(retryAfter) * time.Second)
}

func seconds(n int64) string {
	if n == 1 {
		return "1 second"
	}
	return fmt.Sprintf("%d seconds", n)
}

// maxCachedRetry bounds the rejections cached per operation and kind.
const maxCachedRetry = 120

// rejections caches the rejection outcomes of one operation by retryAfter
// second, so that a rejection allocates only the first time its value
// occurs (an *pipeline.Error cannot change, so sharing it is safe). Values beyond maxCachedRetry share one slot holding the latest:
// they change once a second at most.
type rejections struct {
	id    string
	make  func(id string, retryAfter time.Duration) *pipeline.Error
	cache []atomic.Pointer[pipeline.Error] // index: retryAfter seconds
	last  atomic.Pointer[lastRejection]    // retryAfter >= len(cache)
}

type lastRejection struct {
	seconds int64
	err     *pipeline.Error
}

func newRejections(id string, mk func(string, time.Duration) *pipeline.Error, longest time.Duration) rejections {
	return rejections{id: id, make: mk, cache: make([]atomic.Pointer[pipeline.Error], min(retrySeconds(longest), maxCachedRetry)+1)}
}

func (r *rejections) get(retryAfter time.Duration) *pipeline.Error {
	n := retrySeconds(retryAfter)
	if n >= int64(len(r.cache)) {
		if l := r.last.Load(); l != nil && l.seconds == n {
			return l.err
		}
		e := r.make(r.id, retryAfter)
		r.last.Store(&lastRejection{n, e})
		return e
	}
	if e := r.cache[n].Load(); e != nil {
		return e
	}
	e := r.make(r.id, retryAfter)
	r.cache[n].Store(e)
	return e
}

// retrySeconds is d in whole seconds, rounded up and at least 1, as
// the adapters send it.
func retrySeconds(d time.Duration) int64 {
	return max(1, int64((d+time.Second-1)/time.Second))
}
