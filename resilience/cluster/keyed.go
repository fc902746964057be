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
// shared through the store; it implements resilience.SharedKeyedWindow.
// Each key is counted in its own Redis hash with the window script of
// a shared window (same windows, queue and reservations), under the hash tag
// "{<prefix>:<operation ID>|<key>}": the keys of one operation spread
// over the slots of a Redis Cluster. A key's hash expires three windows
// (plus the windows reserved) after its last call, so a flood of new keys
// costs Redis memory in proportion to the window's length only.
//
// While the store is unreachable it does what the operation's
// OnStoreError says, per key: "local" counts each key's share,
// ceil(PermitLimit / replicas), in this process (a
// resilience.KeyedFixedWindow, bounded to its default number of keys).
type keyedWindow struct {
	w *sharedWindow // its config's key is the hash tag's start; its state the operation's

	fbMu  sync.Mutex // guards local
	local *keyedFallback
}

// keyedFallback is the Local fallback of a keyedWindow and what it was
// made for.
type keyedFallback struct {
	kw           *resilience.KeyedFixedWindow
	limit, queue int
	length       time.Duration
}

// KeyedWindow returns the shared per-key window of operation id under
// policy p (PerKey, StoreTimeout, OnStoreError, ExpectedReplicas). Called
// again for the same id (a reload) it returns the same keyed window with p
// in force for the calls that arrive from then on; a new length counts in
// keys of its own.
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
		kw = &keyedWindow{w: &sharedWindow{st: st, origin: time.Now()}}
		s.keyed[id] = kw
	}
	kw.w.cfg.Store(c)
	return kw, nil
}

// Wait implements resilience.SharedKeyedWindow: it admits a call of key,
// after sleeping until its reserved window opens when the current one is
// used up; it returns an error matching resilience.ErrLimited
// with the time to retry after when the call is turned away, and ctx's
// error when ctx ends first. A key longer than 128 bytes, or holding a
// control character or a brace, is an error that matches neither.
func (kw *keyedWindow) Wait(ctx context.Context, key string) (time.Duration, error) {
	if err := limitkey.Check(key); err != nil {
		return 0, fmt.Errorf("cluster: limit key: %w", err)
	}
	c := kw.w.cfg.Load()
	_, _, err := kw.w.run(ctx, c, c.key+key+c.suffix, 1)
	if err == errFallback {
		markDegraded(ctx)
		err = kw.fallback(ctx, c, key)
	}
	var le *limited.Error
	if errors.As(err, &le) {
		return le.RetryAfter, err
	}
	return 0, err
}

// fallback is the OnStoreError mode of a degraded operation for key.
func (kw *keyedWindow) fallback(ctx context.Context, c *windowConfig, key string) error {
	switch kw.w.st.mode() {
	case modeOpen:
		return nil
	case modeClosed:
		_, err := kw.w.rejectAll(ctx, c)
		return err
	}
	local := kw.localWindows(c, kw.w.st.share(c.limit, c.expect))
	retry, err := local.Wait(ctx, key)
	if errors.Is(err, resilience.ErrLimited) {
		return &limited.Error{RetryAfter: retry, Quota: pipeline.Quota{Limit: c.limit, Window: c.length, Reset: retry}}
	}
	return err
}

// localWindows returns the Local fallback for c with n permits per key:
// the same limiter while n, the length and the queue stay the same, a new
// one (its keys starting empty) when one of them changes.
func (kw *keyedWindow) localWindows(c *windowConfig, n int) *resilience.KeyedFixedWindow {
	kw.fbMu.Lock()
	defer kw.fbMu.Unlock()
	if l := kw.local; l != nil && l.limit == n && l.length == c.length && l.queue == c.queue {
		return l.kw
	}
	w, _ := resilience.NewKeyedFixedWindow(n, c.length, c.queue) // n >= 1, length > 0
	kw.local = &keyedFallback{kw: w, limit: n, queue: c.queue, length: c.length}
	return w
}
