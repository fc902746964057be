package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience"
	"github.com/sundial-go/sundial/resilience/internal/limited"
	"github.com/sundial-go/sundial/resilience/internal/limitkey"
)

// keyedWindow is the per-key fixed window of one operation (Policy.PerKey)
// shared through the store. It implements resilience.SharedKeyedWindow. Each
// key is counted in its own Redis hash with the window script of a shared
// window. It has the same windows, queue and reservations. Its hash tag is
// "{<prefix>:<operation ID>|<key>}", so the keys of one operation spread over
// the slots of a Redis Cluster. A key's hash expires three windows (plus the
// windows reserved) after its last call. So a flood of new keys costs Redis
// memory in proportion to the window's length only.
//
// While the store is unreachable, it does what the operation's OnStoreError
// says, per key. "local" admits each key's part of what the store had left of
// its window, in this process. That is at most ceil(PermitLimit / replicas).
// It counts at most maxKeys keys at once.
type keyedWindow struct {
	w *sharedWindow // its config's key is the hash tag's start; its state the operation's

	mu      sync.Mutex          // guards keys and sweepAt
	keys    map[string]*counted // the store's count and the fallback, per key
	sweepAt time.Time           // no sweep of a full map before then
}

// maxKeys is the most keys whose count a keyedWindow keeps at once.
const maxKeys = 10_000

// fullSweepInterval is the least time between two sweeps of a full
// keyedWindow. A flood of new keys costs one pass over the keys per interval
// at most.
const fullSweepInterval = 100 * time.Millisecond

// KeyedWindow returns the shared per-key window of operation id under policy
// p. It reads PerKey, StoreTimeout, DegradeAfter, OnStoreError and
// ExpectedReplicas. Called again for the same id (a reload), it returns the
// same keyed window. Then p is in force for the calls that arrive from then
// on. A new length counts in keys of its own.
func (s *Store) KeyedWindow(id string, p resilience.Policy) (resilience.SharedKeyedWindow, error) {
	k := p.PerKey
	if k.PermitLimit <= 0 || !validID(id) || strings.Contains(id, "|") {
		return nil, fmt.Errorf("cluster: keyed window of %q: want a positive PerKey.PermitLimit and a valid ID", id)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st, err := s.state(id, p)
	if err != nil {
		return nil, err
	}
	c := newWindowConfig(k.PermitLimit, k.Window, queueOf(k.QueueLimit, p), p.ExpectedReplicas)
	c.key, c.suffix = "{"+s.cfg.KeyPrefix+":"+id+"|", "}:"+c.lengthKey()
	kw := s.keyed[id]
	if kw == nil {
		kw = &keyedWindow{w: &sharedWindow{st: st, origin: time.Now()}, keys: make(map[string]*counted)}
		s.keyed[id] = kw
	}
	kw.w.cfg.Store(c)
	return kw, nil
}

// Wait implements resilience.SharedKeyedWindow. It admits a call of key. When
// the current window is used up, it first sleeps until its reserved window
// opens. When the call is turned away, it returns an error matching
// resilience.ErrLimited with the time to retry after. When ctx ends first, it
// returns ctx's error. A key longer than 128 bytes, or holding a control
// character or a brace, is an error that matches neither.
func (kw *keyedWindow) Wait(ctx context.Context, key string) (time.Duration, error) {
	_, _, _, err := kw.wait(ctx, key)
	var le *limited.Error
	if errors.As(err, &le) {
		return le.RetryAfter, err
	}
	return 0, err
}

// wait is Wait, with the store's quota of the key's window when it decided
// and the index of the admitting window. It also reports whether the store
// did not decide (local). The index is then the fallback's reading, or -1.
func (kw *keyedWindow) wait(ctx context.Context, key string) (q pipeline.Quota, idx int64, local bool, err error) {
	if err := limitkey.Check(key); err != nil {
		return q, -1, false, fmt.Errorf("cluster: limit key: %w", err)
	}
	c := kw.w.cfg.Load()
	cnt := kw.counted(key)
	q, idx, err = kw.w.run(ctx, c, c.key+key+c.suffix, 1, cnt)
	switch err {
	case errFallback:
		q, idx, err = kw.w.fallback(ctx, c, cnt)
		return q, idx, true, err
	case errRefused:
		q, err = kw.w.refuse(c)
		return q, -1, true, err
	}
	return q, idx, false, err
}

// counted returns the count of key, nil when maxKeys keys have one and
// none is idle.
func (kw *keyedWindow) counted(key string) *counted {
	kw.mu.Lock()
	defer kw.mu.Unlock()
	if c := kw.keys[key]; c != nil {
		return c
	}
	if len(kw.keys) >= maxKeys {
		now := time.Now()
		if now.Before(kw.sweepAt) {
			return nil
		}
		kw.sweepAt = now.Add(fullSweepInterval)
		a := kw.w.align.Load()
		for k, c := range kw.keys {
			if c.idle(a, now) {
				delete(kw.keys, k)
			}
		}
		if len(kw.keys) >= maxKeys {
			return nil
		}
	}
	c := &counted{}
	kw.keys[key] = c
	return c
}
