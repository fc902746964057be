package cluster_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sundial-go/sundial/resilience"
	"github.com/sundial-go/sundial/resilience/cluster"
	"github.com/sundial-go/sundial/resilience/cluster/redistest"
	"github.com/sundial-go/sundial/resilience/internal/limited"
)

// TestReloadKeepsTheLocalFallback: with the store down (Local fallback)
// and ConcurrencyLimit 2 on one replica, two calls run; a reload of the
// same operation keeps counting them — a third is turned away, not
// admitted by a fresh limiter (was: three ran at once). Store.Slots and
// Store.Window return the same limiter for an operation.
func TestReloadKeepsTheLocalFallback(t *testing.T) {
	srv := redistest.Start(t)
	r := newReplica(t, srv, cluster.Config{KeyPrefix: "r1", RetryInterval: time.Hour, DegradeAfter: 1})
	p := resilience.Policy{ConcurrencyLimit: 2, PermitLimit: 2, Window: time.Hour, ExpectedReplicas: 1}
	s1, _ := r.store.Slots("a.b", p)
	w1, _ := r.store.Window("a.b", p)
	srv.Kill()
	var rels []func()
	for range 2 {
		rel, err := s1.Acquire(t.Context(), inv())
		if err != nil {
			t.Fatalf("degraded Acquire: %v", err)
		}
		rels = append(rels, rel)
		if _, err := w1.Take(t.Context(), inv()); err != nil {
			t.Fatalf("degraded Take: %v", err)
		}
	}
	if !r.store.Degraded("a.b") {
		t.Fatal("not degraded with Redis down")
	}
	p.StoreTimeout = 80 * time.Millisecond // any reload
	s2, _ := r.store.Slots("a.b", p)
	w2, _ := r.store.Window("a.b", p)
	if s2 != s1 || w2 != w1 {
		t.Fatal("a reload made new limiters for the operation")
	}
	if rel, err := s2.Acquire(t.Context(), inv()); !errors.Is(err, resilience.ErrLimited) {
		if rel != nil {
			rel()
		}
		t.Fatalf("third call after the reload: %v, want ErrLimited (2 running, limit 2)", err)
	}
	if _, err := w2.Take(t.Context(), inv()); err == nil {
		t.Fatal("third permit after the reload admitted, window limit 2")
	}
	// A higher limit applies to the same limiter at once.
	p.ConcurrencyLimit = 3
	s3, _ := r.store.Slots("a.b", p)
	rel, err := s3.Acquire(t.Context(), inv())
	if err != nil {
		t.Fatalf("after raising the limit to 3: %v", err)
	}
	rels = append(rels, rel)
	for _, rel := range rels {
		rel()
	}
}

// TestReloadChangesWaitersLimits: a reload applies to the calls waiting in
// the local queue — a lower limit admits the head only once fewer leases
// than it are held, and a shorter queue turns the newest waiter away.
func TestReloadChangesWaitersLimits(t *testing.T) {
	srv := redistest.Start(t)
	r := newReplica(t, srv, cluster.Config{KeyPrefix: "r2", PollInterval: 2 * time.Millisecond})
	p := resilience.Policy{ConcurrencyLimit: 2, ConcurrencyQueueLimit: 2, StoreTimeout: 2 * time.Second}
	s, _ := r.store.Slots("a.b", p)
	held := acquireN(t, s, 2)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	type result struct {
		rel func()
		err error
	}
	head, second := make(chan result, 1), make(chan result, 1)
	go func() { rel, err := s.Acquire(ctx, inv()); head <- result{rel, err} }()
	waitFor(t, func() bool { return cluster.QueueDepth(s) == 1 })
	go func() { rel, err := s.Acquire(ctx, inv()); second <- result{rel, err} }()
	waitFor(t, func() bool { return cluster.QueueDepth(s) == 2 })

	p.ConcurrencyLimit, p.ConcurrencyQueueLimit = 1, 1
	if _, err := r.store.Slots("a.b", p); err != nil {
		t.Fatal(err)
	}
	if res := <-second; !errors.Is(res.err, resilience.ErrLimited) {
		t.Fatalf("newest waiter after the queue shrank to 1: %v, want ErrLimited", res.err)
	}
	// One lease given back leaves one held: the head, under limit 1,
	// still waits — for at least 50 polls.
	held[0]()
	for range 50 {
		select {
		case res := <-head:
			t.Fatalf("head admitted with 1 lease held and limit 1 (err %v)", res.err)
		case <-time.After(2 * time.Millisecond):
		}
	}
	held[1]()
	res := <-head
	if res.err != nil {
		t.Fatalf("head after both leases were given back: %v", res.err)
	}
	res.rel()
}

// TestProbeWhoseCallerLeftKeepsTheStoreTried: a degraded operation's probe
// whose caller gives up during the store call frees the way for the next
// probe, so the operation recovers once the store answers (was: degraded
// for ever).
func TestProbeWhoseCallerLeftKeepsTheStoreTried(t *testing.T) {
	srv := redistest.Start(t)
	r := newReplica(t, srv, cluster.Config{KeyPrefix: "r3", RetryInterval: 10 * time.Millisecond, DegradeAfter: 1})
	w, _ := r.store.Window("a.b", resilience.Policy{PermitLimit: 1000, Window: time.Hour, StoreTimeout: time.Second})
	srv.Kill()
	if _, err := w.Take(t.Context(), inv()); err != nil {
		t.Fatal(err)
	}
	if !r.store.Degraded("a.b") {
		t.Fatal("not degraded")
	}
	srv.Restart()
	srv.Pause(300 * time.Millisecond)
	time.Sleep(20 * time.Millisecond) // past RetryInterval: the next call probes
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	_, err := w.Take(ctx, inv())
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("probe with a 20 ms caller on a paused store: %v, want the caller's deadline", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for r.store.Degraded("a.b") && time.Now().Before(deadline) {
		_, _ = w.Take(t.Context(), inv())
		time.Sleep(5 * time.Millisecond)
	}
	if r.store.Degraded("a.b") {
		t.Fatal("still degraded 5 s after the store answered again")
	}
}

// TestWindowRecordAheadOfTheClock: a window record whose index is ahead of
// the server's clock (its clock stepped back, or a record written under
// another length) counts as the current window: the operation is admitted
// again from the next window on (was: locked out until the record
// expired, which traffic kept from happening).
func TestWindowRecordAheadOfTheClock(t *testing.T) {
	srv := redistest.Start(t)
	r := newReplica(t, srv, cluster.Config{KeyPrefix: "r4"})
	length := 200 * time.Millisecond
	w, _ := r.store.Window("a.b", resilience.Policy{PermitLimit: 1, Window: length, StoreTimeout: 2 * time.Second})
	key := "{r4:a.b}:w:" + strconv.FormatInt(length.Microseconds(), 10)
	if _, err := srv.Do("HSET", key, "w", "99999999999999", "u", "1", "a", "0"); err != nil {
		t.Fatal(err)
	}
	_, err := w.Take(t.Context(), inv())
	var le *limited.Error
	if !errors.As(err, &le) || le.RetryAfter > length {
		t.Fatalf("Take on a record ahead of the clock = %v, want a rejection for at most one window", err)
	}
	time.Sleep(le.RetryAfter + 5*time.Millisecond)
	if _, err := w.Take(t.Context(), inv()); err != nil {
		t.Fatalf("next window: %v, want admitted", err)
	}
}

// TestWindowLengthChangeCountsInItsOwnKey: a reload that changes
// WindowSeconds counts in a key of the new length — 1 s to 1e9 s no longer
// locks the operation out (the 1 s record's index was ahead of every
// 1e9 s index), and the new length's windows admit PermitLimit. The
// 1e9 s window holds the burst however long it takes; the 1 s calls are
// both admitted in one window or in two.
func TestWindowLengthChangeCountsInItsOwnKey(t *testing.T) {
	srv := redistest.Start(t)
	r := newReplica(t, srv, cluster.Config{KeyPrefix: "r5"})
	p := resilience.Policy{PermitLimit: 2, Window: time.Second, StoreTimeout: 2 * time.Second}
	w, _ := r.store.Window("a.b", p)
	for range 2 {
		if _, err := w.Take(t.Context(), inv()); err != nil {
			t.Fatal(err)
		}
	}
	p.Window = veryLong
	if w2, _ := r.store.Window("a.b", p); w2 != w {
		t.Fatal("a reload made a new window")
	}
	admitted := 0
	for range 5 {
		if _, err := w.Take(t.Context(), inv()); err == nil {
			admitted++
		}
	}
	if admitted != 2 {
		t.Fatalf("after WindowSeconds 1 -> 1e9: %d of 5 admitted in one 1e9 s window, want 2", admitted)
	}
	if n, _ := srv.Do("EXISTS", "{r5:a.b}:w:"+strconv.FormatInt(veryLong.Microseconds(), 10)); n != "1" {
		t.Fatalf("key of the 1e9 s window: EXISTS = %q", n)
	}
}

// TestFarDeadlineLeaseIsCounted: a call whose deadline is centuries away
// holds a lease of at most MaxLease plus the grace — counted, with an
// expiry (was: the lease overflowed into the past, the slot was not
// counted and the key lost its expiry).
func TestFarDeadlineLeaseIsCounted(t *testing.T) {
	srv := redistest.Start(t)
	r := newReplica(t, srv, cluster.Config{KeyPrefix: "r6"})
	s, _ := r.store.Slots("a.b", resilience.Policy{ConcurrencyLimit: 1, StoreTimeout: 2 * time.Second})
	ctx, cancel := context.WithDeadline(t.Context(), time.Date(2400, 1, 1, 0, 0, 0, 0, time.UTC))
	defer cancel()
	rel, err := s.Acquire(ctx, inv())
	if err != nil {
		t.Fatal(err)
	}
	defer rel()
	if _, err := s.Acquire(ctx, inv()); !errors.Is(err, resilience.ErrLimited) {
		t.Fatalf("second call with limit 1 and a far-deadline lease held: %v, want ErrLimited", err)
	}
	pttl, err := r.rdb.PTTL(t.Context(), "{r6:a.b}:c").Result()
	if err != nil || pttl <= 0 || pttl > cluster.MaxLease+cluster.DefaultLeaseGrace {
		t.Fatalf("lease key PTTL = %v (%v), want in (0, MaxLease + grace]", pttl, err)
	}
}

// TestHeartbeatNeverShortensTheReplicaKey: a replica with a short
// heartbeat does not cut the expiry of the replica set below what a
// replica with a long one asked for.
func TestHeartbeatNeverShortensTheReplicaKey(t *testing.T) {
	srv := redistest.Start(t)
	newReplica(t, srv, cluster.Config{KeyPrefix: "r7", Heartbeat: 10 * time.Second})
	fast := newReplica(t, srv, cluster.Config{KeyPrefix: "r7", Heartbeat: 10 * time.Millisecond})
	waitFor(t, func() bool { return fast.store.Replicas() == 2 })
	pttl, err := fast.rdb.PTTL(t.Context(), "{r7}:replicas").Result()
	if err != nil || pttl < 20*time.Second {
		t.Fatalf("replica key PTTL = %v (%v), want about 30 s (three of the slow replica's heartbeats)", pttl, err)
	}
}

// TestReleaseAfterCloseSendsNothing: a slot given back after Close starts
// no store call (the lease expires by itself) and no goroutine Close
// could not wait for.
func TestReleaseAfterCloseSendsNothing(t *testing.T) {
	srv := redistest.Start(t)
	r := newReplica(t, srv, cluster.Config{KeyPrefix: "r8"})
	var zrems atomic.Int64
	r.rdb.AddHook(cmdHook{name: "zrem", n: &zrems})
	s, _ := r.store.Slots("a.b", resilience.Policy{ConcurrencyLimit: 10, StoreTimeout: 2 * time.Second})
	rels := acquireN(t, s, 5)
	// Releases racing with Close: each either ran before it (one ZREM,
	// waited for) or after it (none).
	var wg sync.WaitGroup
	for _, rel := range rels[:4] {
		wg.Go(rel)
	}
	r.store.Close()
	wg.Wait()
	before := zrems.Load()
	rels[4]()
	// A release after Close sends nothing, now or later: the lease stays
	// in the store (it expires by itself). A background ZREM, were one
	// started, would be done well within this wait.
	time.Sleep(200 * time.Millisecond)
	// At most 4 releases and Close's own ZREM (the replica set) came before.
	if n := zrems.Load(); n != before || n > 5 {
		t.Fatalf("ZREMs: %d before the last release, %d after; want none after Close", before, n)
	}
	removed := before - 1 // Close's own ZREM takes the replica out of the count
	if n, _ := srv.Do("ZCARD", "{r8:a.b}:c"); n != strconv.FormatInt(5-removed, 10) {
		t.Fatalf("leases left in the store: %s, want %d (5 taken, %d removed before Close)", n, 5-removed, removed)
	}
}

// cmdHook counts the commands named name.
type cmdHook struct {
	name string
	n    *atomic.Int64
}

func (h cmdHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h cmdHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if counted(cmd, h.name) {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (h cmdHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestReloadRacesWithCalls: reloads changing OnStoreError, StoreTimeout
// and the limits while calls run (go test -race: was a data race on the
// operation's mode and timeout).
func TestReloadRacesWithCalls(t *testing.T) {
	srv := redistest.Start(t)
	r := newReplica(t, srv, cluster.Config{KeyPrefix: "r9", PollInterval: time.Millisecond})
	p := resilience.Policy{PermitLimit: 1000, Window: time.Hour, ConcurrencyLimit: 4, ConcurrencyQueueLimit: 8, StoreTimeout: time.Second}
	w, _ := r.store.Window("a.b", p)
	s, _ := r.store.Slots("a.b", p)
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for ctx.Err() == nil {
				if _, err := w.Take(ctx, inv()); err != nil {
					continue
				}
				if rel, err := s.Acquire(ctx, inv()); err == nil {
					rel()
				}
			}
		})
	}
	modes := []string{"local", "open", "closed"}
	for i := 0; ctx.Err() == nil; i++ {
		p.OnStoreError = modes[i%3]
		p.StoreTimeout = time.Duration(1+i%3) * time.Second
		p.ConcurrencyLimit = 2 + i%3
		p.PermitLimit = 1000 + i
		if _, err := r.store.Window("a.b", p); err != nil {
			t.Fatal(err)
		}
		if _, err := r.store.Slots("a.b", p); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
	wg.Wait()
}

// acquireN takes n slots of s and returns their releases.
func acquireN(t *testing.T, s resilience.SharedSlots, n int) []func() {
	t.Helper()
	var rels []func()
	for range n {
		rel, err := s.Acquire(t.Context(), inv())
		if err != nil {
			t.Fatalf("Acquire %d of %d: %v", len(rels)+1, n, err)
		}
		rels = append(rels, rel)
	}
	return rels
}

// waitFor polls cond for up to 5 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5 s")
		}
		time.Sleep(time.Millisecond)
	}
}
