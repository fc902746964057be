package limiter

import (
	"fmt"
	"time"

	"github.com/sundial-go/sundial/resilience/internal/window"
)

// length returns the window's length.
func (l *FixedWindow) length() time.Duration {
	if l.nq != nil {
		return l.nq.length
	}
	return l.st.Length()
}

// Reconfigure puts new limits on the window l at now (a reload; see
// Limits.Update). It returns cur, the window calls take their permits in.
// cur is l itself, changed in place, or one that took over its counts.
// When the length changed, it also returns next, the window of the new
// length. Calls arriving from switchAt, the current window's end, take
// their permits in next.
func (l *FixedWindow) Reconfigure(now time.Time, limit int, length time.Duration, queue int) (cur, next *FixedWindow, switchAt time.Time) {
	newLength, newQueue := length, queue
	if l.length() != length {
		// Until the boundary the current window goes on with the new
		// limit and queues nobody more: a waiter would be admitted on
		// the old schedule, past the boundary.
		length, queue = l.length(), 0
	}
	since := max(now.Sub(l.origin), 0)
	switch {
	case l.nq != nil && queue == 0:
		l.nq.setLimit(limit)
		cur = l
	case l.nq == nil:
		l.mu.Lock()
		l.st.SetLimit(since, limit)
		l.st.SetQueue(queue)
		l.mu.Unlock()
		cur = l
	default:
		// A queue where there was none: the lock-free window hands its
		// count to one with a queue. A call that loaded the old limits
		// just before is turned away rather than admitted uncounted, in
		// this window or a later one.
		i := int64(since / l.nq.length)
		used := int64(0)
		if w, taken := l.nq.setLimit(0); w == i {
			used = taken
		}
		cur = &FixedWindow{origin: l.origin, st: window.New(limit, length, queue)}
		cur.st.Reset(i, used)
	}
	if newLength == length {
		return cur, nil, time.Time{}
	}
	// The new length starts at the next boundary — or, when calls are
	// queued, at the boundary after the window the newest of them was
	// promised: they are admitted on the old schedule, at most limit per
	// old window, and every window of the new length then admits at most
	// limit. (Counting them in the new windows instead could not keep
	// the new limit: several old windows' waiters can land in one new
	// window.) Until the switch the current windows queue nobody more.
	old := cur.length()
	last := int64(since / old)
	if cur.nq == nil {
		cur.mu.Lock()
		if w, ok := cur.st.LastWin(); ok && w > last {
			last = w
		}
		cur.mu.Unlock()
	}
	switchAt = cur.origin.Add(time.Duration(last+1) * old)
	next = NewOperationWindow(limit, newLength, newQueue)
	next.origin = switchAt
	return cur, next, switchAt
}

// SetPermitLimit changes the window's limit in place. It keeps the permits
// already taken in the current window, and the calls queued. A lower
// limit admits nothing more in the window once they reach the new one. Its length and
// queue stay as they are; to change those, make a new FixedWindow. It
// fails when limit is not positive.
func (l *FixedWindow) SetPermitLimit(limit int) error {
	if limit <= 0 {
		return fmt.Errorf("resilience: SetPermitLimit(%d): want a positive limit", limit)
	}
	since := max(time.Since(l.origin), 0)
	if l.nq != nil {
		l.nq.setLimit(limit)
		return nil
	}
	l.mu.Lock()
	l.st.SetLimit(since, limit)
	l.mu.Unlock()
	return nil
}

// SetLimits changes the limit and the queue in place. The slots held stay
// held. With a lower limit, nobody is admitted until fewer than limit are
// in flight. With a higher one, waiters are admitted at once, oldest
// first. When more calls wait than the new queue holds, the newest of
// them are turned away with resilience.ErrLimited. It fails when limit is
// not positive or queueLimit is negative.
func (l *ConcurrencyLimiter) SetLimits(limit, queueLimit int) error {
	if limit <= 0 || queueLimit < 0 {
		return fmt.Errorf("resilience: SetLimits(%d, %d): want a positive limit and a non-negative queue", limit, queueLimit)
	}
	l.SetLimitsUnchecked(limit, queueLimit)
	return nil
}
