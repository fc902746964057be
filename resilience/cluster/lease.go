package cluster

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/sundial-go/sundial/pipeline"
)

// lease is the share of one window's permits this replica took ahead
// (Policy.LeasePermits). The round trip that admits a call takes up to
// LeasePermits permits of the current window in the same script. Later calls
// use the rest with no round trip, until it is used or the window ends. Every
// permit of a share is counted in the store's window when it is taken. So the
// window never admits more than PermitLimit across replicas. A share outlives
// no window. Its permits are good only until the window ends on the server's
// clock, read conservatively (see fill). A replica that dies holds them only
// that long. Close gives back what is left of a share whose window still
// runs. The next round trip gives back a share left by a reload.
//
// The share lives in the same record as the window's count and reservations
// (windowScript). So a lease and a per-call admission of another replica see
// one count.
type lease struct {
	mu sync.Mutex // guards the fields below
	c  *windowConfig
	// left is the permits not used yet, of the window idx (its index on the
	// server's clock). They are good until until on this process's clock.
	left  int
	idx   int64
	until time.Time
	// rest is the window's permits nobody had taken when the share was taken.
	// With left, it is the remaining count the RateLimit fields show.
	rest int
	// refill is closed when the round trip in flight that takes a share
	// returns; nil while none is.
	refill chan struct{}
	// dry is the index of a window a prefetch found without a permit
	// left: no more prefetches in it.
	dry int64
}

// take admits one call: from the lease when the window leases and a share is
// left, else through the store. It returns the admitting window's index on
// the server's clock. The index is -1 when the OnStoreError fallback decided.
//
// When less than half of LeasePermits is left, the next share is taken in the
// background (prefetch). When the share is used up, one call at a time takes
// the next one. The calls that arrive meanwhile wait for its round trip, or
// the prefetch's, or their context. They then use the new share. A call may
// find none after that wait: the window has no permit left, or the store
// failed. It then asks the store for itself, as without a lease. It may
// reserve a permit of a later window within QueueLimit and its deadline, or
// is rejected.
//
// A permit of the share goes to a call that arrived before the share's window
// ended. The arrival is inv.Arrival, the kernel's reading of the clock (now
// when it is unknown). A process-scope window counts a call in the window of
// its arrival too. The fast path reads no clock of its own.
func (w *sharedWindow) take(ctx context.Context, inv *pipeline.Invocation) (pipeline.Quota, int64, bool, error) {
	c := w.cfg.Load()
	if c.lease <= 1 {
		return w.takeStore(ctx, c, 1)
	}
	at := inv.Timing().Arrival
	known := !at.IsZero()
	if !known {
		at = time.Now()
	}
	l := &w.lease
	l.mu.Lock()
	if q, idx, ok := l.use(c, at); ok {
		var ahead chan struct{}
		if l.left < c.lease/2 && l.refill == nil && l.dry != idx && !w.st.degraded.Load() {
			ahead = make(chan struct{})
			l.refill = ahead
		}
		l.mu.Unlock()
		if ahead != nil {
			w.prefetch(c, ahead)
		}
		return q, idx, false, nil
	}
	if ch := l.refill; ch != nil {
		l.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return pipeline.Quota{Limit: c.limit, Window: c.length}, -1, false, ctx.Err()
		}
		l.mu.Lock()
		q, idx, ok := l.use(c, at)
		l.mu.Unlock()
		if ok {
			return q, idx, false, nil
		}
		return w.takeStore(ctx, c, 1)
	}
	ch := make(chan struct{})
	l.refill = ch
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		l.refill = nil
		l.mu.Unlock()
		close(ch)
	}()
	return w.takeStore(ctx, c, c.lease)
}

// prefetch takes the next share in the background, before this one is used
// up, so that calls do not wait for the round trip. It asks for LeasePermits
// permits of the current window and admits no call. A full window reserves
// nothing: the queue limit it passes is 0. Its failure degrades the
// operation, as a call's would. ch is closed when it ends.
func (w *sharedWindow) prefetch(c *windowConfig, ch chan struct{}) {
	l := &w.lease
	done := func() {
		l.mu.Lock()
		l.refill = nil
		l.mu.Unlock()
		close(ch)
	}
	if !w.st.background(func(ctx context.Context) {
		defer done()
		sent := time.Now()
		res, err := windowScript.Run(ctx, w.st.s.rdb, []string{c.key}, c.args[0], c.args[1], 0, -1, c.lease).Int64Slice()
		if err == nil && len(res) != 7 {
			err = fmt.Errorf("cluster: window script returned %d values", len(res))
		}
		if !w.st.result(err, false, sent) {
			return
		}
		w.count.observe(w.aligned(res[6], sent.Add(micros(res[3])), c.length), c.limit-int(res[2]))
		if res[0] != 1 {
			l.mu.Lock()
			l.dry = res[5]
			l.mu.Unlock()
			return
		}
		l.fill(w, c, int(res[4]), res[5], sent.Add(micros(res[3])), int(res[2]))
	}) {
		done()
	}
}

// use takes a permit of the share when it is of config c and its window still
// runs at now. l.mu is held.
func (l *lease) use(c *windowConfig, now time.Time) (pipeline.Quota, int64, bool) {
	if l.c != c || l.left <= 0 || !now.Before(l.until) {
		return pipeline.Quota{}, 0, false
	}
	l.left--
	return pipeline.Quota{Limit: c.limit, Window: c.length, Remaining: l.rest + l.left, Reset: l.until.Sub(now)}, l.idx, true
}

// fill records n permits of window idx, taken under c, as the share. The
// window ends no earlier than until: the script's reset added to the instant
// the call was sent.
func (l *lease) fill(w *sharedWindow, c *windowConfig, n int, idx int64, until time.Time, rest int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.c == c && l.idx == idx && l.left > 0 {
		l.left += n
		l.rest = rest
		return l.left
	}
	if old, left, oldIdx := l.c, l.left, l.idx; left > 0 && time.Now().Before(l.until) {
		w.st.background(func(ctx context.Context) { giveBack(ctx, w, old, oldIdx, left) })
	}
	l.c, l.left, l.idx, l.until, l.rest = c, n, idx, until, rest
	return n
}

// giveBack returns n unused permits of window idx to the store's count.
func giveBack(ctx context.Context, w *sharedWindow, c *windowConfig, idx int64, n int) {
	_ = giveBackScript.Run(ctx, w.st.s.rdb, []string{c.key}, idx, c.length.Microseconds(), n).Err()
}

// returnLeases gives back, within ctx, the unused permits of every
// window's share whose window still runs (Close).
func (s *Store) returnLeases(ctx context.Context) {
	s.mu.Lock()
	windows := slices.Collect(maps.Values(s.windows))
	s.mu.Unlock()
	for _, w := range windows {
		l := &w.lease
		l.mu.Lock()
		c, n, idx, live := l.c, l.left, l.idx, time.Now().Before(l.until)
		l.left = 0
		l.mu.Unlock()
		if n > 0 && live {
			giveBack(ctx, w, c, idx, n)
		}
	}
}
