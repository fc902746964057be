package resilience

import (
	"context"
	"time"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience/deadline"
	"github.com/sundial-go/sundial/resilience/internal/limiter"
)

// windowLimit is the operation's fixed window (PermitLimit,
// WindowSeconds, QueueLimit) as a [Limit]; see [FixedWindow]. Rejection:
// KERNEL_UNAVAILABLE_002 with a retry-after, the time until the next
// window. A call is counted in the window of its arrival (the kernel's
// reading of the clock, [pipeline.Timing]).
type windowLimit struct {
	window *limiter.FixedWindow
	// A WindowSeconds change takes effect at the next boundary: from
	// switchAt on, calls take their permits in next.
	next     *limiter.FixedWindow
	switchAt time.Time
	headers  bool // RateLimitHeaders: publish the quota in the Reply
	rej      *rejections
}

func (l *Limits) windowOf(old *chain, p Policy, now time.Time) *windowLimit {
	wl := &windowLimit{headers: p.RateLimitHeaders, rej: &l.rateLimited}
	if old.window != nil {
		wl.window, wl.next, wl.switchAt = old.window.at(now).Reconfigure(now, p.PermitLimit, p.Window, p.QueueLimit)
	} else {
		wl.window = limiter.NewOperationWindow(p.PermitLimit, p.Window, p.QueueLimit)
	}
	return wl
}

// at returns the window calls arriving at now take their permits in.
func (wl *windowLimit) at(now time.Time) *limiter.FixedWindow {
	if wl.next != nil && !now.Before(wl.switchAt) {
		return wl.next
	}
	return wl.window
}

// arrival returns the window of inv's arrival and the arrival.
func (wl *windowLimit) arrival(inv *pipeline.Invocation) (*limiter.FixedWindow, time.Time) {
	now := inv.Timing().Arrival
	known := !now.IsZero()
	if !known {
		now = time.Now()
	}
	return wl.at(now), now
}

// TryAcquire implements the optional method of [Limit]: a window without a queue decides at
// once; one with a queue waits in Acquire.
func (wl *windowLimit) TryAcquire(inv *pipeline.Invocation) (Permit, bool, error) {
	w, now := wl.arrival(inv)
	if !w.Queueless() {
		return Permit{}, true, nil
	}
	return Permit{}, false, wl.take(inv, w, now)
}

// take counts the call in the queueless window w.
func (wl *windowLimit) take(inv *pipeline.Invocation, w *limiter.FixedWindow, now time.Time) error {
	ok, retry, q := w.TakeAt(now, wl.headers)
	if wl.headers {
		inv.Reply().SetQuota(q)
	}
	if !ok {
		return wl.rej.get(retry)
	}
	return nil
}

// Acquire implements [Limit].
func (wl *windowLimit) Acquire(ctx context.Context, inv *pipeline.Invocation) (Permit, error) {
	w, now := wl.arrival(inv)
	if w.Queueless() {
		return Permit{}, wl.take(inv, w, now)
	}
	_, retry, err := w.WaitEvicted(ctx)
	if wl.headers {
		inv.Reply().SetQuota(w.Quota())
	}
	switch {
	case err == nil:
		return Permit{}, nil
	case err == ErrLimited:
		return Permit{}, wl.rej.get(retry)
	}
	return Permit{}, deadline.Attribute(ctx)
}

// queueDepth returns the calls waiting in the window (and in the one of
// the next length).
func (wl *windowLimit) queueDepth() int {
	n := wl.window.QueueDepth()
	if wl.next != nil {
		n += wl.next.QueueDepth()
	}
	return n
}
