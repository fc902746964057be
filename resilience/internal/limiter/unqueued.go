package limiter

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/sundial-go/sundial/pipeline"
)

// unqueued is the state of a FixedWindow without a queue (queueLimit 0).
// It is the common case, and the one on every call's path. With nobody
// waiting for a later window, a window's state is one counter. So a call
// takes its permit with one atomic add instead of the limiter's mutex.
// Calls on several cores never wait for each other.
//
// cur is the latest window a call has seen. A call in a later window
// replaces it with a fresh count: one allocation per window, not per
// call. A call that read the clock just before such a replacement counts
// its permit in the newer window. So no window ever admits more than
// limit calls. A count may run past limit: every call after the last
// permit adds one and is turned away.
//
// Each count carries its window's limit. A reload replaces the count
// (setLimit): it seals the old one, then installs one with the new limit
// and the permits actually taken. A call that adds to a sealed count
// waits for the reload and counts again in the new one. So no permit is
// taken in a count the reload discards.
type unqueued struct {
	limit  atomic.Int64 // the limit of windows to come; a reload changes it
	length time.Duration
	cur    atomic.Pointer[windowCount]
	reload sync.Mutex // held while a reload replaces cur

	onReload func() // test hook: called by setLimit after it stores the new limit
}

// windowCount is the number of calls that asked for a permit of window
// index, and the window's limit.
type windowCount struct {
	index int64
	limit int64
	taken int64        // permits taken before a reload put this count in (asked starts there)
	asked atomic.Int64 // at or past sealed: a reload replaced this count
}

// takenOf returns the permits taken in the window when asked calls had
// counted. Those past the limit were turned away. A count a lower limit
// put in may start past it: its permits were taken before.
func (c *windowCount) takenOf(asked int64) int64 {
	return max(c.taken, min(asked, c.limit))
}

// sealed is added to a count that a reload replaces. Calls that count in
// it afterwards see a number past every limit (maxLimit) and count again.
const sealed = 1 << 62

// maxLimit is the largest limit a count holds; larger ones are clamped.
// A sealed count is past it, however many calls were counted before.
const maxLimit = 1 << 60

func newUnqueued(limit int, length time.Duration) *unqueued {
	u := &unqueued{length: length}
	u.limit.Store(clampLimit(limit))
	u.cur.Store(&windowCount{limit: clampLimit(limit)})
	return u
}

func clampLimit(limit int) int64 { return min(int64(limit), maxLimit) }

// take takes a permit for a call arriving at now, since the limiter's
// origin. Or it reports the time until the next window. index is the
// window the call was counted in. That is the one containing now, or a
// later one when another call had already moved on to it.
func (u *unqueued) take(now time.Duration) (ok bool, retryAfter time.Duration, index int64) {
	i := int64(now / u.length)
	for {
		c := u.cur.Load()
		if c.index < i {
			n := &windowCount{index: i, limit: u.limit.Load()}
			n.asked.Store(1)
			if !u.cur.CompareAndSwap(c, n) {
				continue
			}
			if n.limit < 1 { // handed over (Reconfigure): every call is turned away
				return false, u.retryAfter(i, now), i
			}
			return true, 0, i
		}
		asked := c.asked.Add(1)
		if asked <= c.limit {
			return true, 0, c.index
		}
		if asked > sealed {
			u.reload.Lock() // the reload that sealed c is done when we have the lock
			u.reload.Unlock()
			continue
		}
		return false, u.retryAfter(c.index, now), c.index
	}
}

// retryAfter returns the time from now to the end of window i.
func (u *unqueued) retryAfter(i int64, now time.Duration) time.Duration {
	return time.Duration(i+1)*u.length - now
}

// quota reports the window containing now as a Quota.
func (u *unqueued) quota(now time.Duration) pipeline.Quota {
	return u.quotaOf(int64(now/u.length), now)
}

// quotaOf reports window i, seen at now, as a Quota.
func (u *unqueued) quotaOf(i int64, now time.Duration) pipeline.Quota {
	used, limit := int64(0), u.limit.Load()
	if c := u.current(); c.index == i {
		used, limit = c.takenOf(c.asked.Load()), c.limit
	}
	return pipeline.Quota{Limit: int(limit), Window: u.length, Remaining: int(max(limit-used, 0)), Reset: u.retryAfter(i, now)}
}

// current returns cur once no reload is replacing it.
func (u *unqueued) current() *windowCount {
	c := u.cur.Load()
	if c.asked.Load() >= sealed {
		u.reload.Lock()
		c = u.cur.Load()
		u.reload.Unlock()
	}
	return c
}

// NewOperationWindow returns a FixedWindow that takes the lock-free path
// when it has no queue. A KeyedFixedWindow's limiters keep the mutex:
// evicting an idle one must be atomic with its permits.
func NewOperationWindow(permitLimit int, length time.Duration, queueLimit int) *FixedWindow {
	l := NewKeyedPart(permitLimit, length, queueLimit)
	if queueLimit == 0 {
		l.nq = newUnqueued(permitLimit, length)
	}
	return l
}

// setLimit changes the limit in place. The current window keeps the
// permits taken in it: its count runs past the old limit by the calls it
// turned away, so it is cut back to the permits taken. A higher limit then
// admits the difference; a lower one admits nothing more once they reach
// it. It returns the current window and the permits taken in it.
func (u *unqueued) setLimit(limit int) (index, taken int64) {
	u.reload.Lock()
	defer u.reload.Unlock()
	lim := clampLimit(limit)
	u.limit.Store(lim)
	if u.onReload != nil {
		u.onReload()
	}
	for {
		c := u.cur.Load()
		if c.limit == lim {
			return c.index, c.takenOf(c.asked.Load())
		}
		// Calls counted in c from here on see it sealed and wait for the
		// lock; the count before it is exact.
		taken = c.takenOf(c.asked.Add(sealed) - sealed)
		n := &windowCount{index: c.index, limit: lim, taken: taken}
		n.asked.Store(taken)
		if u.cur.CompareAndSwap(c, n) {
			return c.index, taken
		}
		// A call moved on to a later window, under either limit.
	}
}
