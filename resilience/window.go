package resilience

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sundial-go/sundial/resilience/internal/limiter"
)

// KeyedFixedWindow is a set of [FixedWindow] limiters, one per key: per
// tenant, per client, per API key. A key's limiter is created on its first
// call, with the same limits. Use it in application middleware to limit each caller
// separately (see the package example).
//
// A key's limiter is dropped once its current window has no permit taken
// and nobody waits in it; a later call for that key starts a new one. So
// memory follows the keys active in the last window, not every key ever
// seen, which matters when keys come from callers.
//
// The number of limiters is also capped (WithMaxKeys, default 10,000). A
// flood of distinct keys, one new tenant value per request, thus cannot
// make it allocate without bound within one window. When that many keys
// have a limiter, a call for a key that has none is turned away with
// [ErrLimited] until a sweep finds an idle one. A full set is swept at
// most once per 100 ms, however fast new keys arrive. So the flood costs
// at most one pass over the limiters per 100 ms. Keys that already have a
// limiter keep it and their limits.
//
// It is safe for concurrent use and starts no goroutine.
type KeyedFixedWindow struct {
	permitLimit, queueLimit int
	length                  time.Duration
	maxKeys                 int

	mu            sync.RWMutex // guards parts, sweepAt and nextFullSweep
	parts         map[string]*limiter.FixedWindow
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
	if _, err := limiter.NewFixedWindow(permitLimit, length, queueLimit); err != nil {
		return nil, fmt.Errorf("resilience: NewKeyedFixedWindow: %w", err)
	}
	k := &KeyedFixedWindow{
		permitLimit: permitLimit, queueLimit: queueLimit, length: length, maxKeys: defaultMaxKeys,
		parts: make(map[string]*limiter.FixedWindow),
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
		evicted, retry, err := l.WaitEvicted(ctx)
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
func (k *KeyedFixedWindow) get(key string) (*limiter.FixedWindow, time.Duration) {
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
			if l.EvictIfIdle(now) {
				delete(k.parts, key)
			}
		}
		k.sweepAt = min(max(2*len(k.parts), minSweep), k.maxKeys)
		if len(k.parts) >= k.maxKeys {
			return nil, k.nextFullSweep.Sub(now)
		}
	}
	l = limiter.NewKeyedPart(k.permitLimit, k.length, k.queueLimit)
	k.parts[key] = l
	return l, 0
}
