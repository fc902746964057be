package resilience

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience/internal/limited"
	"github.com/sundial-go/sundial/resilience/internal/window"
)

// ErrLimited is returned by the limiters of this package when they turn a
// call away: the window is used up and its queue is full, the call's
// deadline comes before the window it would wait for, or every
// concurrency slot and queue place is taken.
var ErrLimited = limited.ErrLimited

// FixedWindow is a fixed-window rate limiter with a FIFO queue: at most
// permitLimit calls are admitted per window; when a window is used up, up
// to queueLimit calls wait for a later one (oldest first), and the rest
// are turned away at once with the time until the next window. When a
// waiting call gives up, those behind it move up: a later arrival never
// takes the freed permit ahead of them.
//
// Windows are aligned to the moment the limiter was created and follow
// each other back to back; unused permits do not carry over. State is
// derived from the clock when a call arrives: a FixedWindow starts no
// goroutine and costs nothing while idle. It is safe for concurrent use.
//
// Unlike a token bucket (golang.org/x/time/rate), a fixed window hands out
// a whole window's permits as soon as it opens: 2 permits per 60 s means
// two calls now, then none until the minute is over.
type FixedWindow struct {
	origin time.Time // windows are aligned to it (monotonic)

	mu      sync.Mutex     // guards st and evicted
	st      *window.Window // which window each permit belongs to
	evicted bool           // dropped by a KeyedFixedWindow; take no more permits

	nq *unqueued // not nil: no queue, and st is unused (window_unqueued.go)
}

// NewFixedWindow returns a limiter admitting permitLimit calls per window
// of the given length, with up to queueLimit calls waiting for a later
// window. It fails when permitLimit or length is not positive or
// queueLimit is negative.
func NewFixedWindow(permitLimit int, length time.Duration, queueLimit int) (*FixedWindow, error) {
	if permitLimit <= 0 || length <= 0 || queueLimit < 0 {
		return nil, fmt.Errorf("resilience: NewFixedWindow(%d, %v, %d): want a positive limit and window and a non-negative queue", permitLimit, length, queueLimit)
	}
	return newOperationWindow(permitLimit, length, queueLimit), nil
}

func newFixedWindow(permitLimit int, length time.Duration, queueLimit int) *FixedWindow {
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
// It returns [ErrLimited] at once, with the time until the next window,
// when the queue is full or when ctx's deadline comes before the window
// the call would wait for: a call is never queued only to time out there.
// It returns ctx.Err() when ctx is done on arrival or ends during the
// wait; the call's place in the queue is then given back.
func (l *FixedWindow) Wait(ctx context.Context) (retryAfter time.Duration, err error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	_, retryAfter, err = l.wait(ctx)
	return retryAfter, err
}

// wait is Wait without the arrival check; evicted reports that the limiter
// had been dropped by a KeyedFixedWindow and nothing was taken.
func (l *FixedWindow) wait(ctx context.Context) (evicted bool, retryAfter time.Duration, err error) {
	if l.nq != nil {
		if ok, retry, _ := l.nq.take(time.Since(l.origin)); !ok {
			return false, retry, ErrLimited
		}
		return false, 0, nil
	}
	deadline := time.Duration(0) // none
	if d, ok := ctx.Deadline(); ok {
		deadline = max(d.Sub(l.origin), 1)
	}
	now := time.Since(l.origin)
	l.mu.Lock()
	if l.evicted {
		l.mu.Unlock()
		return true, 0, nil
	}
	dec, wt, retry := l.st.Reserve(now, deadline, true)
	var start time.Duration
	if wt != nil {
		start = l.st.Start(wt.Win())
	}
	l.mu.Unlock()
	switch dec {
	case window.Admit:
		return false, 0, nil
	case window.Reject:
		return false, retry, ErrLimited
	}
	return false, 0, l.sleep(ctx, wt, start-now)
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

// quota reports the current window as a Quota.
func (l *FixedWindow) quota() pipeline.Quota {
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

// evictIfIdle reports whether the limiter has no permit taken in the current
// window and nobody waiting, and if so marks it evicted.
func (l *FixedWindow) evictIfIdle(now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.st.Advance(now.Sub(l.origin))
	if l.st.Used() > 0 || l.st.Queued() > 0 {
		return false
	}
	l.evicted = true
	return true
}

// KeyedFixedWindow is a set of [FixedWindow] limiters, one per key — per
// tenant, per client, per API key — created on a key's first call with the
// same limits. Use it in application middleware to limit each caller
// separately (see the package example).
//
// A key's limiter is dropped once its current window has no permit taken
// and nobody waits in it; a later call for that key starts a new one. So
// memory follows the keys active in the last window, not every key ever
// seen, which matters when keys come from callers.
//
// The number of limiters is also capped (WithMaxKeys, default
// 10,000), so that a flood of distinct keys — one new tenant value
// per request — cannot make it allocate without bound within one window.
// When that many keys have a limiter, a call for a key that has none is
// turned away with [ErrLimited] until a sweep finds an idle one; a full
// set is swept at most once per 100 ms, however fast new keys arrive, so
// the flood costs at most one pass over the limiters per 100 ms. Keys
// that already have a limiter keep it and their limits.
//
// It is safe for concurrent use and starts no goroutine.
type KeyedFixedWindow struct {
	permitLimit, queueLimit int
	length                  time.Duration
	maxKeys                 int

	mu            sync.RWMutex // guards parts, sweepAt and nextFullSweep
	parts         map[string]*FixedWindow
	sweepAt       int       // sweep idle limiters when parts grows to this size
	nextFullSweep time.Time // no sweep of a full set, so no new key while full, before then

	onSweep func(keys int) // test hook: called at each sweep, under mu
}

// defaultMaxKeys is the largest number of keys a KeyedFixedWindow holds a
// limiter for when WithMaxKeys is not given. A limiter costs a few hundred
// bytes, so the default bounds a keyed limiter to a few megabytes.
const defaultMaxKeys = 10_000

// fullSweepInterval is the least time between two sweeps of a
// KeyedFixedWindow holding its maximum number of keys.
const fullSweepInterval = 100 * time.Millisecond

// KeyedOption configures NewKeyedFixedWindow.
type KeyedOption interface{ applyKeyed(*KeyedFixedWindow) }

type keyedOptionFunc func(*KeyedFixedWindow)

func (f keyedOptionFunc) applyKeyed(k *KeyedFixedWindow) { f(k) }

// WithMaxKeys sets the largest number of keys that have a limiter at once
// (default 10,000); see KeyedFixedWindow for what happens beyond
// it. n <= 0 keeps the default.
func WithMaxKeys(n int) KeyedOption {
	return keyedOptionFunc(func(k *KeyedFixedWindow) {
		if n > 0 {
			k.maxKeys = n
		}
	})
}

// NewKeyedFixedWindow returns a keyed limiter whose limiters admit
// permitLimit calls per window of the given length, with up to queueLimit
// waiting, each. It fails on the same values as NewFixedWindow.
func NewKeyedFixedWindow(permitLimit int, length time.Duration, queueLimit int, opts ...KeyedOption) (*KeyedFixedWindow, error) {
	if _, err := NewFixedWindow(permitLimit, length, queueLimit); err != nil {
		return nil, fmt.Errorf("resilience: NewKeyedFixedWindow: %w", err)
	}
	k := &KeyedFixedWindow{
		permitLimit: permitLimit, queueLimit: queueLimit, length: length, maxKeys: defaultMaxKeys,
		parts: make(map[string]*FixedWindow),
	}
	for _, o := range opts {
		if o != nil {
			o.applyKeyed(k)
		}
	}
	k.sweepAt = min(minSweep, k.maxKeys)
	return k, nil
}

// minSweep is the number of keys below which idle limiters are not swept.
const minSweep = 64

// Wait is [FixedWindow.Wait] on key's limiter. When key has no limiter and
// the maximum number of keys have one, it returns [ErrLimited] at once,
// with the time until the next look for idle limiters (at most 100 ms).
func (k *KeyedFixedWindow) Wait(ctx context.Context, key string) (retryAfter time.Duration, err error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	for {
		l, full := k.get(key)
		if l == nil {
			return full, ErrLimited
		}
		evicted, retry, err := l.wait(ctx)
		if !evicted {
			return retry, err
		}
	}
}

// Len returns the number of keys that currently have a limiter.
func (k *KeyedFixedWindow) Len() int {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return len(k.parts)
}

// get returns key's limiter, creating it if need be, or nil and the time
// until the next sweep when every limiter is in use.
func (k *KeyedFixedWindow) get(key string) (*FixedWindow, time.Duration) {
	k.mu.RLock()
	l := k.parts[key]
	k.mu.RUnlock()
	if l != nil {
		return l, 0
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if l = k.parts[key]; l != nil {
		return l, 0
	}
	if len(k.parts) >= k.sweepAt {
		now := time.Now()
		full := len(k.parts) >= k.maxKeys
		if full {
			// A sweep of a full set visits every limiter: at most one per
			// fullSweepInterval, however many new keys arrive (and whether
			// or not the last one freed any). Until then new keys are turned away.
			if now.Before(k.nextFullSweep) {
				return nil, k.nextFullSweep.Sub(now)
			}
			k.nextFullSweep = now.Add(fullSweepInterval)
		}
		if k.onSweep != nil {
			k.onSweep(len(k.parts))
		}
		for key, l := range k.parts {
			if l.evictIfIdle(now) {
				delete(k.parts, key)
			}
		}
		k.sweepAt = min(max(2*len(k.parts), minSweep), k.maxKeys)
		if len(k.parts) >= k.maxKeys {
			return nil, k.nextFullSweep.Sub(now)
		}
	}
	l = newFixedWindow(k.permitLimit, k.length, k.queueLimit)
	k.parts[key] = l
	return l, 0
}
