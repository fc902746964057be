// Package limiter is the fixed window and the concurrency limiter of
// package resilience. It has the controls that resilience.Limits and the
// shared limits' local fallbacks (resilience/cluster) use. They are the
// queue depth, the calls in flight, the quota, limits changed in place,
// and priority classes. Package resilience exports the part an
// application calls: FixedWindow.Allow and Wait, and
// ConcurrencyLimiter.Acquire, TryAcquire and Release.
package limiter

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience/internal/limited"
	"github.com/sundial-go/sundial/resilience/internal/window"
)

// FixedWindow is resilience.FixedWindow (see its contract). Windows are
// aligned to the moment the limiter was created; state is derived from the
// clock when a call arrives. It is safe for concurrent use.
type FixedWindow struct {
	origin time.Time // windows are aligned to it (monotonic)

	mu      sync.Mutex     // guards st and evicted
	st      *window.Window // which window each permit belongs to
	evicted bool           // dropped by a KeyedFixedWindow; take no more permits

	nq *unqueued // not nil: no queue, and st is unused (unqueued.go)
}

// NewFixedWindow returns a limiter admitting permitLimit calls per window
// of the given length, with up to queueLimit calls waiting for a later
// window. It fails when permitLimit or length is not positive or
// queueLimit is negative.
func NewFixedWindow(permitLimit int, length time.Duration, queueLimit int) (*FixedWindow, error) {
	if permitLimit <= 0 || length <= 0 || queueLimit < 0 {
		return nil, fmt.Errorf("resilience: NewFixedWindow(%d, %v, %d): want a positive limit and window and a non-negative queue", permitLimit, length, queueLimit)
	}
	return NewOperationWindow(permitLimit, length, queueLimit), nil
}

// NewKeyedPart returns the limiter of one key of a KeyedFixedWindow. It
// takes the mutex path even without a queue, so evicting it is atomic
// with its permits. The arguments are valid (the caller checked them).
func NewKeyedPart(permitLimit int, length time.Duration, queueLimit int) *FixedWindow {
	return &FixedWindow{origin: time.Now(), st: window.New(permitLimit, length, queueLimit)}
}

// Allow takes a permit of the current window if one is left. It never
// waits; when it returns false, retryAfter is the time until the next
// window opens. To wait in the queue instead, use Wait.
func (l *FixedWindow) Allow() (ok bool, retryAfter time.Duration) {
	now := time.Since(l.origin)
	if l.nq != nil {
		ok, retry, _ := l.nq.take(now)
		return ok, retry
	}
	l.mu.Lock()
	d, _, retry := l.st.Reserve(now, 0, false)
	l.mu.Unlock()
	return d == window.Admit, retry
}

// Wait takes a permit, waiting for a later window if the current one is
// used up and the queue has room. It returns nil when the call may
// proceed.
//
// It returns resilience.ErrLimited at once, with the time until the next
// window, when the queue is full. It does so too when ctx's deadline
// comes before the window the call would wait for. A call is never queued
// only to time out there.
// It returns ctx.Err() when ctx is done on arrival or ends during the
// wait; the call's place in the queue is then given back.
func (l *FixedWindow) Wait(ctx context.Context) (retryAfter time.Duration, err error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	_, retryAfter, err = l.WaitEvicted(ctx)
	return retryAfter, err
}

// WaitEvicted is Wait without the arrival check; evicted reports that the limiter
// had been dropped by a KeyedFixedWindow and nothing was taken.
func (l *FixedWindow) WaitEvicted(ctx context.Context) (evicted bool, retryAfter time.Duration, err error) {
	evicted, _, retryAfter, err = l.WaitIndexed(ctx)
	return evicted, retryAfter, err
}

// WaitIndexed is WaitEvicted that also returns the index of the window
// the call was admitted in (counted from the limiter's origin).
func (l *FixedWindow) WaitIndexed(ctx context.Context) (evicted bool, win int64, retryAfter time.Duration, err error) {
	if l.nq != nil {
		ok, retry, i := l.nq.take(time.Since(l.origin))
		if !ok {
			return false, 0, retry, limited.ErrLimited
		}
		return false, i, 0, nil
	}
	deadline := time.Duration(0) // none
	if d, ok := ctx.Deadline(); ok {
		deadline = max(d.Sub(l.origin), 1)
	}
	now := time.Since(l.origin)
	l.mu.Lock()
	if l.evicted {
		l.mu.Unlock()
		return true, 0, 0, nil
	}
	dec, wt, retry := l.st.Reserve(now, deadline, true)
	var start time.Duration
	if wt != nil {
		start = l.st.Start(wt.Win())
	}
	l.mu.Unlock()
	switch dec {
	case window.Admit:
		return false, l.st.Index(now), 0, nil
	case window.Reject:
		return false, 0, retry, limited.ErrLimited
	}
	err = l.sleep(ctx, wt, start-now)
	l.mu.Lock()
	win = wt.Win()
	l.mu.Unlock()
	return false, win, 0, err
}

// sleep waits d for the window of wt to open, or gives its permit back
// when ctx ends first. When a waiter ahead leaves, wt moves to an earlier
// window and sleep waits for that one instead.
func (l *FixedWindow) sleep(ctx context.Context, wt *window.Waiter, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			// Its window has opened, unless a reload lowered the limit
			// and moved it later (SetLimit).
			l.mu.Lock()
			start := l.st.Start(wt.Win())
			l.mu.Unlock()
			if left := start - time.Since(l.origin); left > 0 {
				t.Reset(left)
				continue
			}
			return nil
		case <-wt.Moved:
			l.mu.Lock()
			start := l.st.Start(wt.Win())
			l.mu.Unlock()
			t.Reset(start - time.Since(l.origin))
		case <-ctx.Done():
			l.mu.Lock()
			l.st.Cancel(time.Since(l.origin), wt)
			l.mu.Unlock()
			return ctx.Err()
		}
	}
}

// Quota reports the current window: its limit, length, the permits left
// and the time until the next one opens.
func (l *FixedWindow) Quota() pipeline.Quota {
	now := time.Since(l.origin)
	if l.nq != nil {
		return l.nq.quota(now)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.st.Advance(now)
	limit := l.st.Limit()
	length := l.st.Length()
	i := l.st.Index(now)
	return pipeline.Quota{Limit: limit, Window: length, Remaining: max(limit-int(l.st.Used()), 0), Reset: l.st.Start(i+1) - now}
}

// QueueDepth returns the number of calls waiting for a later window.
func (l *FixedWindow) QueueDepth() int {
	if l.nq != nil {
		return 0
	}
	now := time.Since(l.origin)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.st.Advance(now)
	return int(l.st.Queued())
}

// EvictIfIdle reports whether the limiter has no permit taken in the current
// window and nobody waiting, and if so marks it evicted.
func (l *FixedWindow) EvictIfIdle(now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.st.Advance(now.Sub(l.origin))
	if l.st.Used() > 0 || l.st.Queued() > 0 {
		return false
	}
	l.evicted = true
	return true
}

// Queueless reports whether l has no queue: it then decides every call at
// once, with TakeAt.
func (l *FixedWindow) Queueless() bool { return l.nq != nil }

// TakeAt takes a permit of a queueless window (Queueless) for a call that
// arrived at now, or reports the time until the next window. With quota,
// q is the window the call was counted in. That is the one containing
// now, or a later one when another call had already moved on to it.
func (l *FixedWindow) TakeAt(now time.Time, quota bool) (ok bool, retryAfter time.Duration, q pipeline.Quota) {
	since := max(now.Sub(l.origin), 0)
	ok, retryAfter, index := l.nq.take(since)
	if quota {
		q = l.nq.quotaOf(index, since)
	}
	return ok, retryAfter, q
}
