package limiter

import (
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
type unqueued struct {
	limit  atomic.Int64 // changed in place by a reload (setLimit)
	length time.Duration
	cur    atomic.Pointer[windowCount]
}

// windowCount is the number of calls that asked for a permit of window
// index.
type windowCount struct {
	index int64
	asked atomic.Int64
}

func newUnqueued(limit int, length time.Duration) *unqueued {
	u := &unqueued{length: length}
	u.limit.Store(int64(limit))
	u.cur.Store(&windowCount{})
	return u
}

// take takes a permit for a call arriving at now, since the limiter's
// origin. Or it reports the time until the next window. index is the
// window the call was counted in. That is the one containing now, or a
// later one when another call had already moved on to it.
func (u *unqueued) take(now time.Duration) (ok bool, retryAfter time.Duration, index int64) {
	i := int64(now / u.length)
	for {
		c := u.cur.Load()
		if c.index < i {
			n := &windowCount{index: i}
			n.asked.Store(1)
			if u.cur.CompareAndSwap(c, n) {
				return true, 0, i
			}
			continue
		}
		if c.asked.Add(1) <= u.limit.Load() {
			return true, 0, c.index
		}
		return false, time.Duration(c.index+1)*u.length - now, c.index
	}
}

// quota reports the window containing now as a Quota.
func (u *unqueued) quota(now time.Duration) pipeline.Quota {
	return u.quotaOf(int64(now/u.length), now)
}

// quotaOf reports window i, seen at now, as a Quota.
func (u *unqueued) quotaOf(i int64, now time.Duration) pipeline.Quota {
	used, limit := int64(0), u.limit.Load()
	if c := u.cur.Load(); c.index == i {
		used = min(c.asked.Load(), limit)
	}
	return pipeline.Quota{Limit: int(limit), Window: u.length, Remaining: int(limit - used), Reset: time.Duration(i+1)*u.length - now}
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

// setLimit changes the limit in place, at now. The count of the current
// window runs past the old limit by the calls it turned away. It is cut
// back to the permits actually taken, so a higher limit admits the
// difference. Calls adding to the old count were turned away: it was
// already past the limit.
func (u *unqueued) setLimit(now time.Duration, limit int) {
	old := u.limit.Swap(int64(limit))
	i := int64(now / u.length)
	for {
		c := u.cur.Load()
		if c.index != i || c.asked.Load() <= old {
			return
		}
		n := &windowCount{index: i}
		n.asked.Store(old)
		if u.cur.CompareAndSwap(c, n) {
			return
		}
	}
}
