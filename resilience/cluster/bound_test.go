package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience"
	"github.com/sundial-go/sundial/resilience/cluster"
	"github.com/sundial-go/sundial/resilience/cluster/redistest"
)

// The rig of the bound tests: three replicas share an operation window of
// boundLimit per second and a per-key limit of boundKeyLimit per second
// for each of boundKeys, "local" when the store fails, ExpectedReplicas 3.
const (
	boundReplicas = 3
	boundLimit    = 100
	boundKeyLimit = 10
	boundWindow   = time.Second
)

var boundKeys = []string{"acme", "globex", "initech"}

// slot names one window: of the operation's count (key "") or of a key's,
// by its index on the server's clock.
type slot struct {
	key string
	idx int64
}

// reply is a count the store reported to a replica: used permits of a
// window, read back by the test at at.
type reply struct {
	replica int
	used    int
	at      time.Time
}

// ledger counts admissions per window as docs/cluster.md bounds them: the
// store's, and each replica's local fallback's, with what each replica had
// read from the store.
type ledger struct {
	mu      sync.Mutex
	store   map[slot]int
	local   map[slot]*[boundReplicas]int
	first   map[slot]*[boundReplicas]time.Time // start of a replica's first fallback call of the window
	replies map[slot][]reply
	refused int // turned away because the store did not answer a healthy operation
	stray   int // admitted by nobody's count: must stay 0 with "local"
}

func newLedger() *ledger {
	return &ledger{store: map[slot]int{}, local: map[slot]*[boundReplicas]int{},
		first: map[slot]*[boundReplicas]time.Time{}, replies: map[slot][]reply{}}
}

func limitOf(key string) int {
	if key == "" {
		return boundLimit
	}
	return boundKeyLimit
}

// record counts one call of replica r on key ("": the operation's
// window), started at start: labelled by the store (local false) or by the
// fallback.
func (l *ledger) record(t *testing.T, r int, key string, start time.Time, q pipeline.Quota, idx int64, local bool, err error) {
	limited := errors.Is(err, resilience.ErrLimited)
	if err != nil && !limited {
		t.Errorf("replica %d, key %q: %v; want an admission or ErrLimited", r, key, err)
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	s := slot{key, idx}
	switch {
	case local && idx >= 0:
		if l.first[s] == nil {
			l.first[s], l.local[s] = new([boundReplicas]time.Time), new([boundReplicas]int)
		}
		if f := &l.first[s][r]; f.IsZero() || start.Before(*f) {
			*f = start
		}
		if err == nil {
			l.local[s][r]++
		}
	case local && err == nil:
		l.stray++
	case local:
		l.refused++
	case idx >= 0: // the store decided
		used := limitOf(key)
		if err == nil {
			used -= q.Remaining
			l.store[s]++
		}
		l.replies[s] = append(l.replies[s], reply{r, used, time.Now()})
	}
}

// check asserts the bound of docs/cluster.md on every window: the store
// admits at most the limit L, and replica i's fallback at most
// ceil((L - u_i) / 3), where u_i is the most the store had reported to it
// in that window before its first fallback call there; so a window admits
// at most L plus those parts. It returns the largest total of an
// operation's window and of a key's.
func (l *ledger) check(t *testing.T) (worst, worstKey int) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stray > 0 {
		t.Errorf("%d calls admitted outside every count", l.stray)
	}
	slots := map[slot]bool{}
	for s := range l.store {
		slots[s] = true
	}
	for s := range l.local {
		slots[s] = true
	}
	var over []string
	for s := range slots {
		limit := limitOf(s.key)
		total, bound := l.store[s], limit
		if total > limit {
			t.Errorf("window %v: the store admitted %d, limit %d", s, total, limit)
		}
		for r := range boundReplicas {
			if l.first[s] == nil || l.first[s][r].IsZero() {
				continue
			}
			u := 0
			for _, rep := range l.replies[s] {
				if rep.replica == r && rep.at.Before(l.first[s][r]) {
					u = max(u, rep.used)
				}
			}
			part := max((limit-u+boundReplicas-1)/boundReplicas, 0)
			if n := l.local[s][r]; n > part {
				t.Errorf("window %v: replica %d's fallback admitted %d; the store had reported %d of %d, its part is %d",
					s, r, n, u, limit, part)
			}
			total += l.local[s][r]
			bound += part
		}
		if total > bound {
			t.Errorf("window %v admitted %d, over its bound %d", s, total, bound)
		}
		if total > limit {
			over = append(over, fmt.Sprintf("%v: %d (bound %d)", s, total, bound))
		}
		if s.key == "" {
			worst = max(worst, total)
		} else {
			worstKey = max(worstKey, total)
		}
	}
	sort.Strings(over)
	t.Logf("%d windows counted, %d over the limit: %v", len(slots), len(over), over)
	return worst, worstKey
}

// boundRig is three replicas under load, counted in a ledger.
type boundRig struct {
	rs          []*replica
	ws          []resilience.SharedWindow
	kws         []resilience.SharedKeyedWindow
	led         *ledger
	transitions atomic.Int64
	calls       atomic.Int64
	stop        chan struct{}
	wg          sync.WaitGroup
}

// newBoundRig starts the replicas on clients from connect, with
// StoreTimeout timeout, and their load: two callers per replica, each
// asking the operation's window and a key's in turn every 5 ms.
func newBoundRig(t *testing.T, connect func() redis.UniversalClient, prefix string, timeout time.Duration) *boundRig {
	g := &boundRig{led: newLedger(), stop: make(chan struct{})}
	p := resilience.Policy{PermitLimit: boundLimit, Window: boundWindow, Scope: resilience.ScopeCluster,
		StoreTimeout: timeout, OnStoreError: "local", ExpectedReplicas: boundReplicas,
		PerKey: resilience.PerKey{PermitLimit: boundKeyLimit, Window: boundWindow}}
	for range boundReplicas {
		r := newReplicaOn(t, connect(), cluster.Config{KeyPrefix: prefix, RetryInterval: 100 * time.Millisecond,
			OnTransition: func(string, bool) { g.transitions.Add(1) }})
		w, err := r.store.Window("orders.create", p)
		if err != nil {
			t.Fatal(err)
		}
		kw, err := r.store.KeyedWindow("orders.create", p)
		if err != nil {
			t.Fatal(err)
		}
		g.rs, g.ws, g.kws = append(g.rs, r), append(g.ws, w), append(g.kws, kw)
	}
	for i := range 2 * boundReplicas {
		r := i % boundReplicas
		g.wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-g.stop:
					return
				case <-time.After(5 * time.Millisecond):
				}
				ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
				start := time.Now()
				q, idx, local, err := cluster.TakeLabelled(g.ws[r], ctx)
				g.led.record(t, r, "", start, q, idx, local, err)
				key := boundKeys[(i+n)%len(boundKeys)]
				start = time.Now()
				q, idx, local, err = cluster.WaitLabelled(g.kws[r], ctx, key)
				g.led.record(t, r, key, start, q, idx, local, err)
				cancel()
				g.calls.Add(2)
			}
		})
	}
	t.Cleanup(g.halt)
	return g
}

// halt stops the load and waits for its callers.
func (g *boundRig) halt() {
	select {
	case <-g.stop:
	default:
		close(g.stop)
	}
	g.wg.Wait()
}

// windows waits until n windows have passed.
func (g *boundRig) windows(n int) { time.Sleep(time.Duration(n) * boundWindow) }

// recovered waits until no replica is degraded (10 s at most).
func (g *boundRig) recovered(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for r := range g.rs {
		for g.rs[r].store.Degraded("orders.create") {
			if time.Now().After(deadline) {
				t.Fatalf("replica %d still degraded 10 s after the store came back", r)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// TestSlowRepliesDegradeNothing: three replicas on a healthy Redis whose
// replies are delayed past StoreTimeout one at a time. Each slow reply's
// call is turned away, no replica degrades, and no window of the
// operation or of a key admits more than its limit.
func TestSlowRepliesDegradeNothing(t *testing.T) {
	srv := redistest.Start(t)
	// A StoreTimeout that a healthy Redis meets even on a loaded machine
	// (load 40 under -race has taken over a second): degrading would take
	// three failures in a row, 6 s without an answer. Each replica has its
	// own link, and its slow replies come one at a time.
	const timeout = 2 * time.Second
	const delay = timeout + 500*time.Millisecond
	var delayed atomic.Int64
	connect := func() redis.UniversalClient {
		var replies atomic.Int64
		var busy atomic.Bool
		addr := startProxy(t, srv.Addr(), func([]byte) time.Duration { return 0 }, func([]byte) time.Duration {
			// Every 20th reply, while no other is held: one at a time.
			if replies.Add(1)%20 != 0 || !busy.CompareAndSwap(false, true) {
				return 0
			}
			delayed.Add(1)
			time.AfterFunc(delay, func() { busy.Store(false) })
			return delay
		})
		return cluster.NewClient(&redis.Options{Addr: addr})
	}
	g := newBoundRig(t, connect, "b1", timeout)
	g.windows(6)
	g.halt()
	worst, worstKey := g.led.check(t)
	if n := g.transitions.Load(); n > 0 {
		t.Errorf("%d degraded/recovered transitions with Redis healthy, want 0", n)
	}
	if delayed.Load() < 3 || g.led.refused == 0 {
		t.Fatalf("%d replies delayed, %d calls turned away for them: the test slowed nothing", delayed.Load(), g.led.refused)
	}
	if worst > boundLimit || worstKey > boundKeyLimit {
		t.Errorf("a window admitted %d (limit %d), a key's %d (limit %d)", worst, boundLimit, worstKey, boundKeyLimit)
	}
	t.Logf("%d calls, %d replies delayed by %v (StoreTimeout %v), %d calls turned away; busiest window %d of %d, key %d of %d",
		g.calls.Load(), delayed.Load(), delay, timeout, g.led.refused, worst, boundLimit, worstKey, boundKeyLimit)
}

// TestFaultsKeepTheBound: three replicas under load while Redis is
// paused, then killed and started again (its counts lost). Every window of
// the operation and of each key stays within the bound of
// docs/cluster.md, counted call by call.
func TestFaultsKeepTheBound(t *testing.T) {
	srv := redistest.Start(t)
	g := newBoundRig(t, func() redis.UniversalClient { return cluster.NewClient(&redis.Options{Addr: srv.Addr()}) },
		"b2", 50*time.Millisecond)
	g.windows(2)
	srv.Pause(1500 * time.Millisecond)
	g.windows(2)
	g.recovered(t)
	g.windows(1)
	srv.Kill()
	g.windows(1)
	srv.Restart()
	g.recovered(t)
	g.windows(2)
	g.halt()
	worst, worstKey := g.led.check(t)
	if g.transitions.Load() < 2*boundReplicas {
		t.Fatalf("%d transitions: the faults degraded no replica", g.transitions.Load())
	}
	t.Logf("%d calls through a pause and a restart, %d transitions; busiest window %d (limit %d), key %d (limit %d)",
		g.calls.Load(), g.transitions.Load(), worst, boundLimit, worstKey, boundKeyLimit)
}

// TestFailoverKeepsTheBound: three replicas under load on a Redis Cluster
// whose master holding the operation's window is killed; its replica
// takes over with the counts it had replicated. Every window of the
// operation and of each key stays within the bound of docs/cluster.md.
func TestFailoverKeepsTheBound(t *testing.T) {
	c := redistest.StartCluster(t)
	g := newBoundRig(t, func() redis.UniversalClient {
		return cluster.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	}, "b3", 50*time.Millisecond)
	g.windows(2)
	took := c.KillMasterOf(t, "{b3:orders.create}:w:1000000")
	g.recovered(t)
	g.windows(2)
	g.halt()
	worst, worstKey := g.led.check(t)
	if g.transitions.Load() < 2 {
		t.Fatalf("%d transitions: the failover degraded no replica", g.transitions.Load())
	}
	t.Logf("failover in %v; %d calls, %d transitions; busiest window %d (limit %d), key %d (limit %d)",
		took.Round(time.Millisecond), g.calls.Load(), g.transitions.Load(), worst, boundLimit, worstKey, boundKeyLimit)
}

// TestRecoveryChargesTheFallback: a replica that admitted calls on its
// local fallback adds them to the store's count with its first round trip
// after the store answers again, so the window admits no more than its
// limit across the replicas (without the charge: the fallback's 5 on top
// of 10). One window for the whole test; PermitLimit 10, two replicas.
func TestRecoveryChargesTheFallback(t *testing.T) {
	srv := redistest.Start(t)
	slow := new(atomic.Bool)
	p := resilience.Policy{PermitLimit: 10, Window: veryLong, StoreTimeout: 50 * time.Millisecond, ExpectedReplicas: 2}
	a := newReplicaOn(t, cluster.NewClient(&redis.Options{Addr: startDelayProxy(t, srv.Addr(), slow, 300*time.Millisecond, nil)}),
		cluster.Config{KeyPrefix: "b4", RetryInterval: 10 * time.Millisecond, DegradeAfter: 1})
	b := newReplica(t, srv, cluster.Config{KeyPrefix: "b4"})
	wa, _ := a.store.Window("a.b", p)
	wb, _ := b.store.Window("a.b", p)
	admitted := 0
	take := func(w resilience.SharedWindow) bool {
		_, err := w.Take(t.Context(), inv())
		if err != nil && !errors.Is(err, resilience.ErrLimited) {
			t.Fatal(err)
		}
		if err == nil {
			admitted++
		}
		return err == nil
	}
	take(wa) // the store's count: 1
	slow.Store(true)
	local := 0
	for range 10 {
		if take(wa) {
			local++
		}
	}
	if !a.store.Degraded("a.b") || local != 5 {
		t.Fatalf("degraded %v, the fallback admitted %d of 10; want ceil((10 - 1) / 2) = 5", a.store.Degraded("a.b"), local)
	}
	slow.Store(false)
	waitFor(t, func() bool { take(wa); return !a.store.Degraded("a.b") })
	for take(wb) {
	}
	if admitted > p.PermitLimit {
		t.Fatalf("the window admitted %d across the replicas, limit %d: the fallback's %d were not counted on recovery",
			admitted, p.PermitLimit, local)
	}
	t.Logf("the window admitted %d (limit %d), %d of them on the fallback", admitted, p.PermitLimit, local)
}
