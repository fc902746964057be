package cluster

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/sundial-go/sundial/resilience/internal/limiter"
)

// alignment places the server's windows on this process's clock. Window idx
// ends at end, read early. That is the instant the call that learnt it was
// sent, plus the time the server said was left.
type alignment struct {
	idx    int64
	end    time.Time
	length time.Duration
}

// index returns the server's window containing t, as this process reads it.
func (a *alignment) index(t time.Time) int64 {
	d := t.Sub(a.end.Add(-a.length))
	j := int64(d / a.length)
	if d < 0 && d%a.length != 0 {
		j--
	}
	return a.idx + j
}

// unaligned labels the windows of a fallback that never learnt the server's.
// A charge in it goes to whatever window is current.
const unaligned = math.MaxInt64

// counted is what one replica knows of one window's count (an operation's, or
// one key's) and its Local fallback for it. While the store answers, it keeps
// the count the store last reported for the current window. While degraded,
// the fallback admits this replica's part of what that count left. That is
// ceil((limit - count) / replicas). In a window it saw nothing of, it is the
// whole share, ceil(limit / replicas). The next round trip of the same window
// adds the calls the fallback admits to the store's count (charge). So a
// replica that recovers counts them once.
type counted struct {
	mu sync.Mutex

	// The store's count: used permits of server window idx (seen).
	seen bool
	idx  int64
	used int

	// The fallback, nil until its first call: a window of the share, with the
	// limits it was made for. It is aligned so that its window j is the server's
	// window base+j (aligned; else its own).
	fw           *limiter.FixedWindow
	aligned      bool
	base         int64
	limit, queue int
	length       time.Duration
	seeded       int64 // the fallback's window last given the store's count
	seededAny    bool
	// pend fallback admissions of server window pendIdx are not yet in the
	// store's count. pendWin is the fallback's window.
	pendIdx, pendWin, pend int64
}

// observe records that the store counted used permits in window a.idx.
func (c *counted) observe(a *alignment, used int) {
	c.mu.Lock()
	if !c.seen || a.idx > c.idx || (a.idx == c.idx && used > c.used) {
		c.seen, c.idx, c.used = true, a.idx, used
	}
	c.mu.Unlock()
}

// charge returns the fallback admissions the next round trip adds to the
// store's count. That is n in window idx (unaligned: the current one).
func (c *counted) charge() (idx, n int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pendIdx, c.pend
}

// charged records that the store added n admissions of window idx (or
// dropped them: their window had ended).
func (c *counted) charged(idx, n int64) {
	if n == 0 {
		return
	}
	c.mu.Lock()
	if c.pendIdx == idx {
		c.pend = max(c.pend-n, 0)
	}
	c.mu.Unlock()
}

// admit runs one call through the Local fallback. The fallback is a window of
// share permits with queue places; the replicas share limit across the
// cluster. a aligns it to the server's windows (nil: not known). It returns
// the fallback to read the quota from, and the label of the window that
// admitted the call or turned it away. The label is the server's index as
// this process reads it. It is the fallback's own index when the fallback is
// not aligned.
func (c *counted) admit(ctx context.Context, a *alignment, limit, share, replicas, queue int, length time.Duration) (*limiter.FixedWindow, int64, time.Duration, error) {
	now := time.Now()
	c.mu.Lock()
	fw := c.window(a, share, queue, length, now)
	j := fw.Index(now)
	if !c.seededAny || c.seeded != j {
		// The first call of a window: what the store had counted in it
		// is not this replica's to take.
		c.seeded, c.seededAny = j, true
		if c.aligned && c.seen && c.idx == c.base+j {
			left := max(limit-c.used, 0)
			fw.Hold(now, share-min((left+replicas-1)/replicas, share))
		}
	}
	base, aligned := c.base, c.aligned
	c.mu.Unlock()
	_, win, retry, err := fw.WaitIndexed(ctx)
	if err != nil {
		return fw, base + j, retry, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	idx := int64(unaligned)
	if aligned {
		idx = base + win
	}
	if c.fw == fw {
		if c.pendIdx != idx || c.pendWin != win || c.pend == 0 {
			c.pendIdx, c.pendWin, c.pend = idx, win, 0
		}
		c.pend++
	}
	return fw, base + win, 0, nil
}

// window returns the fallback for share permits per length with queue places.
// It is the same limiter while the length and the queue stay; a new share
// changes its limit in place. When either changes, it is a new one, aligned
// by a when known. c.mu is held.
func (c *counted) window(a *alignment, share, queue int, length time.Duration, now time.Time) *limiter.FixedWindow {
	realign := !c.aligned && a != nil && a.length == length
	if c.fw != nil && c.length == length && c.queue == queue && !realign {
		if c.limit != share {
			_ = c.fw.SetPermitLimit(share) // share >= 1
			c.limit = share
		}
		return c.fw
	}
	origin, base := now, int64(0)
	c.aligned = a != nil && a.length == length
	if c.aligned {
		origin, base = a.end.Add(-a.length), a.idx
		// The window containing now, so that origin is never after it.
		for origin.After(now) {
			origin, base = origin.Add(-length), base-1
		}
	}
	c.fw, c.base, c.limit, c.queue, c.length = limiter.NewAlignedWindow(share, length, queue, origin), base, share, queue, length
	c.seededAny, c.pend = false, 0
	return c.fw
}

// idle reports whether c holds nothing of the server's current window (by a;
// with none known, nothing of any window). That means no count from the
// store, no fallback admission or waiter, and no charge.
func (c *counted) idle(a *alignment, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	cur := int64(math.MaxInt64)
	if a != nil {
		cur = a.index(now)
	}
	if (c.seen && c.idx >= cur) || (c.pend > 0 && c.pendIdx >= cur) {
		return false
	}
	if c.fw == nil {
		return true
	}
	q := c.fw.Quota()
	return q.Remaining == q.Limit && c.fw.QueueDepth() == 0
}
