package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience"
	"github.com/sundial-go/sundial/resilience/cluster"
	"github.com/sundial-go/sundial/resilience/cluster/redistest"
	"github.com/sundial-go/sundial/resilience/internal/limited"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(redistest.StopSharedAfter(m),
		// go-redis probes a dead node once a second until its pool is
		// closed, then ends (TestMasterFailoverMidLoad closes it last).
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}

// replica is one process's store on the shared server.
type replica struct {
	rdb   redis.UniversalClient
	store *cluster.Store
	calls atomic.Int64 // limit scripts run (hook): store round trips of the limits
}

type countHook struct{ n *atomic.Int64 }

func (h countHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		// The limits' scripts, not the heartbeat: their key is an
		// operation's ({prefix:id}:w or :c).
		if n := cmd.Name(); n == "evalsha" || n == "eval" {
			if args := cmd.Args(); len(args) > 3 && !strings.HasSuffix(fmt.Sprint(args[3]), ":replicas") {
				h.n.Add(1)
			}
		}
		return next(ctx, cmd)
	}
}
func (h countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func newReplica(t *testing.T, srv *redistest.Server, cfg cluster.Config) *replica {
	t.Helper()
	return newReplicaOn(t, cluster.NewClient(&redis.Options{Addr: srv.Addr()}), cfg)
}

// newReplicaOn is newReplica on the client rdb, which it closes.
func newReplicaOn(t *testing.T, rdb redis.UniversalClient, cfg cluster.Config) *replica {
	t.Helper()
	r := &replica{rdb: rdb}
	r.rdb.AddHook(countHook{&r.calls})
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(tlog{t}, nil))
	}
	r.store = cluster.New(r.rdb, cfg)
	t.Cleanup(func() { r.store.Close(); r.rdb.Close() })
	if err := r.store.Load(t.Context()); err != nil {
		t.Fatal(err)
	}
	return r
}

func inv() *pipeline.Invocation { return pipeline.NewInvocation(pipeline.Spec{}) }

// TestWindowSharedAcrossReplicas: three replicas share PermitLimit 10;
// 30 calls in one window admit exactly 10, and each admission is one
// round trip.
func TestWindowSharedAcrossReplicas(t *testing.T) { onRedis(t, testWindowSharedAcrossReplicas) }

func testWindowSharedAcrossReplicas(t *testing.T, connect func() redis.UniversalClient) {
	// A window no test run crosses, and a StoreTimeout no round trip of a
	// loaded machine reaches: the count is exact however long the burst
	// takes.
	p := resilience.Policy{PermitLimit: 10, Window: veryLong, Scope: resilience.ScopeCluster, StoreTimeout: time.Minute}
	var ws []resilience.SharedWindow
	var rs []*replica
	for range 3 {
		r := newReplicaOn(t, connect(), cluster.Config{KeyPrefix: "t1"})
		w, err := r.store.Window("orders.create", p)
		if err != nil {
			t.Fatal(err)
		}
		rs, ws = append(rs, r), append(ws, w)
	}
	before := rs[0].calls.Load()
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for i := range 30 {
		wg.Go(func() {
			q, err := ws[i%3].Take(t.Context(), inv())
			if err == nil {
				admitted.Add(1)
				if q.Limit != 10 || q.Remaining < 0 || q.Remaining > 9 {
					t.Errorf("quota %+v", q)
				}
				return
			}
			var le *limited.Error
			if !errors.As(err, &le) || le.RetryAfter <= 0 || le.RetryAfter > p.Window {
				t.Errorf("rejection %v", err)
			}
		})
	}
	wg.Wait()
	if got := admitted.Load(); got != 10 {
		t.Fatalf("admitted %d of 30 across 3 replicas, want exactly 10", got)
	}
	// Replica 0 saw 10 calls: at most one round trip each (after its first
	// rejection, the window is known to be exhausted and costs none).
	if n := rs[0].calls.Load() - before; n > 10 {
		t.Fatalf("replica 0 made %d store calls for 10 admissions", n)
	}
	t.Logf("admitted 10 of 30 across 3 replicas; replica 0: %d round trips for 10 calls", rs[0].calls.Load()-before)
}

// TestExhaustedWindowCostsNoRoundTrip: once a window is known to be used
// up with its queue full, a rejection is answered locally.
func TestExhaustedWindowCostsNoRoundTrip(t *testing.T) {
	onRedis(t, testExhaustedWindowCostsNoRoundTrip)
}

func testExhaustedWindowCostsNoRoundTrip(t *testing.T, connect func() redis.UniversalClient) {
	r := newReplicaOn(t, connect(), cluster.Config{KeyPrefix: "t2"})
	p := resilience.Policy{PermitLimit: 2, Window: veryLong, StoreTimeout: 2 * time.Second}
	w, _ := r.store.Window("a.b", p)
	for range 3 {
		_, _ = w.Take(t.Context(), inv())
	}
	before := r.calls.Load()
	for range 100 {
		if _, err := w.Take(t.Context(), inv()); !errors.Is(err, resilience.ErrLimited) {
			t.Fatalf("Take = %v, want ErrLimited", err)
		}
	}
	if n := r.calls.Load() - before; n != 0 {
		t.Fatalf("100 rejections of an exhausted window made %d store calls, want 0", n)
	}
}

// TestQueueReservesLaterWindowWithinDeadline: a call finding the window
// used up reserves a permit of a later window while the queue has room and
// only if that window opens before its deadline. PermitLimit 1, QueueLimit
// 2: A runs in window W, Q1 reserves W+1; S, whose deadline is half a
// window, would need W+2 (at least a window away) and is turned away at
// once, the queue untouched; Q2 reserves W+2; D finds the queue full.
// Every outcome is read on the server's window index, not timed: an
// attempt in which the server's window changed before D was answered is
// run again (attempts).
func TestQueueReservesLaterWindowWithinDeadline(t *testing.T) {
	srv := redistest.Start(t)
	p := resilience.Policy{PermitLimit: 1, Window: time.Second, QueueLimit: 2, StoreTimeout: time.Minute}
	attempts(t, "t3", func(prefix string) string { return queueReservesLaterWindow(t, srv, p, prefix) })
}

// attempts runs attempt, each time on a key prefix of its own, until one
// counts (it returns ""), at most 5 times. An attempt does not count when
// the server's window changed before its scenario was in place (it says
// how): its assertions are about one window, and stay exact.
func attempts(t *testing.T, name string, attempt func(prefix string) string) {
	t.Helper()
	for i := 1; ; i++ {
		why := attempt(name + "-" + strconv.Itoa(i))
		if why == "" {
			return
		}
		if i == 5 {
			t.Fatalf("five attempts did not count; the last: %s", why)
		}
		t.Logf("attempt %d does not count (%s); again", i, why)
	}
}

// queueReservesLaterWindow is one attempt of
// TestQueueReservesLaterWindowWithinDeadline on key prefix prefix; it
// returns why the attempt does not count (the server's window changed
// before D was answered), or "".
func queueReservesLaterWindow(t *testing.T, srv *redistest.Server, p resilience.Policy, prefix string) string {
	r := newReplica(t, srv, cluster.Config{KeyPrefix: prefix})
	var scripts atomic.Int64
	r.rdb.AddHook(doneHook{name: "evalsha", n: &scripts})
	w, _ := r.store.Window("a.b", p)
	// The scenario starts as a server window opens: on a loaded machine it
	// has the whole window to be answered in.
	for start := serverWindow(t, r, p.Window); serverWindow(t, r, p.Window) == start; {
		time.Sleep(time.Millisecond)
	}
	key := "{" + prefix + ":a.b}:w:" + strconv.FormatInt(p.Window.Microseconds(), 10)
	record := func() string {
		v, err := r.rdb.HMGet(t.Context(), key, "w", "u", "f", "o").Result()
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprint(v...)
	}
	_, a, err := cluster.TakeIndexed(w, t.Context())
	if err != nil {
		t.Fatalf("A: %v", err)
	}
	// The queued calls, each in its goroutine: it returns when its
	// reserved window opens (or the attempt is abandoned).
	type result struct {
		idx int64
		now time.Time // the server's clock when the call returned
		err error
	}
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	queue := func() chan result {
		ch := make(chan result, 1)
		n := scripts.Load()
		wg.Go(func() {
			_, idx, err := cluster.TakeIndexed(w, ctx)
			now, terr := r.rdb.Time(t.Context()).Result()
			if terr != nil {
				t.Error(terr)
			}
			ch <- result{idx, now, err}
		})
		waitFor(t, func() bool { return scripts.Load() == n+1 }) // its reservation is answered
		return ch
	}
	q1 := queue()
	before := record()
	short, cancelShort := context.WithTimeout(t.Context(), p.Window/2)
	_, sIdx, err := cluster.TakeIndexed(w, short)
	cancelShort()
	var le *limited.Error
	switch {
	case errors.As(err, &le) && sIdx == a:
		// S was answered in W: the window it could reserve (W+2) opens at
		// least a window later, after its deadline.
		if le.RetryAfter <= p.Window/2 {
			t.Fatalf("S rejected with retry-after %v, want past its deadline (%v)", le.RetryAfter, p.Window/2)
		}
	case err == nil || errors.As(err, &le) || errors.Is(err, context.DeadlineExceeded):
		// Answered in a later window (admitted, or rejected there), or no
		// answer before its deadline: the attempt does not count — the last
		// one fails on it.
		return fmt.Sprintf("S answered in window %d (A in %d): %v", sIdx, a, err)
	default:
		t.Fatalf("S: %v", err)
	}
	if after := record(); after != before {
		t.Fatalf("S, turned away, changed the record %s -> %s; want the queue untouched", before, after)
	}
	q2 := queue()
	_, dIdx, err := cluster.TakeIndexed(w, t.Context())
	if !errors.Is(err, resilience.ErrLimited) {
		if dIdx != a {
			return fmt.Sprintf("D answered in window %d (A in %d): %v", dIdx, a, err)
		}
		t.Fatalf("D, past the queue limit in window %d: %v, want ErrLimited", dIdx, err)
	}
	if dIdx != a {
		return fmt.Sprintf("D rejected in window %d (A in %d)", dIdx, a)
	}
	// A, S and D were answered in W, so Q1 and Q2 reserved in it: each
	// runs in the window it reserved, not before it opens on the server's
	// clock.
	for i, q := range []chan result{q1, q2} {
		res := <-q
		want := a + int64(i) + 1
		opens := time.UnixMicro(want * p.Window.Microseconds())
		if res.err != nil || res.idx != want || res.now.Before(opens) {
			t.Fatalf("Q%d: ran in window %d at %v (%v); want window %d, from %v", i+1, res.idx, res.now, res.err, want, opens)
		}
	}
	return ""
}

// TestSlotsSharedAcrossReplicas: ConcurrencyLimit 2 across three replicas,
// counted from the handlers; queued calls run as slots free.
func TestSlotsSharedAcrossReplicas(t *testing.T) { onRedis(t, testSlotsSharedAcrossReplicas) }

func testSlotsSharedAcrossReplicas(t *testing.T, connect func() redis.UniversalClient) {
	p := resilience.Policy{ConcurrencyLimit: 2, ConcurrencyQueueLimit: 4, StoreTimeout: 2 * time.Second}
	var ss []resilience.SharedSlots
	for range 3 {
		r := newReplicaOn(t, connect(), cluster.Config{KeyPrefix: "t4", PollInterval: 5 * time.Millisecond})
		s, err := r.store.Slots("a.b", p)
		if err != nil {
			t.Fatal(err)
		}
		ss = append(ss, s)
	}
	var running, peak, done, limited atomic.Int64
	var wg sync.WaitGroup
	for i := range 12 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			rel, err := ss[i%3].Acquire(ctx, inv())
			if err != nil {
				if errors.Is(err, resilience.ErrLimited) {
					limited.Add(1)
					return
				}
				t.Errorf("Acquire: %v", err)
				return
			}
			n := running.Add(1)
			for {
				p := peak.Load()
				if n <= p || peak.CompareAndSwap(p, n) {
					break
				}
			}
			time.Sleep(20 * time.Millisecond)
			running.Add(-1)
			rel()
			done.Add(1)
		})
	}
	wg.Wait()
	if peak.Load() > 2 {
		t.Fatalf("%d ran at once across 3 replicas, limit 2", peak.Load())
	}
	if done.Load()+limited.Load() != 12 || done.Load() < 6 {
		t.Fatalf("done %d, limited %d of 12", done.Load(), limited.Load())
	}
	t.Logf("peak %d running across 3 replicas; %d ran, %d turned away", peak.Load(), done.Load(), limited.Load())
}

// TestLeaseOfDeadHolderExpires: a replica that dies holding a slot (it
// never releases, and its heartbeat stops) gives it back by itself after
// its deadline plus the grace: never before, and long before the default
// lease (60 s) would have lapsed.
func TestLeaseOfDeadHolderExpires(t *testing.T) { onRedis(t, testLeaseOfDeadHolderExpires) }

func testLeaseOfDeadHolderExpires(t *testing.T, connect func() redis.UniversalClient) {
	cfg := cluster.Config{KeyPrefix: "t5", LeaseGrace: 200 * time.Millisecond, PollInterval: 5 * time.Millisecond,
		Heartbeat: 50 * time.Millisecond}
	p := resilience.Policy{ConcurrencyLimit: 1, ConcurrencyQueueLimit: 1, StoreTimeout: time.Minute}
	dead := newReplicaOn(t, connect(), cfg)
	ds, _ := dead.store.Slots("a.b", p)
	start := time.Now() // before the deadline is set: the lease ends 500 ms after it at the earliest
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	if _, err := ds.Acquire(ctx, inv()); err != nil {
		t.Fatal(err)
	}
	// The holder is gone: never released, its heartbeat stopped.
	dead.store.Close()
	live := newReplicaOn(t, connect(), cfg)
	ls, _ := live.store.Slots("a.b", p)
	wctx, wcancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer wcancel()
	rel, err := ls.Acquire(wctx, inv())
	if err != nil {
		t.Fatalf("slot of a dead holder not given back: %v", err)
	}
	rel()
	got := time.Since(start)
	if got < 450*time.Millisecond {
		t.Fatalf("slot free after %v, before the deadline (300ms) + grace (200ms)", got)
	}
	t.Logf("dead holder's slot free after %v (deadline 300ms + grace 200ms)", got)
}

// TestStoreDownModes: with Redis killed, each OnStoreError mode does what
// it says, the operation is degraded (one transition), and it recovers
// by itself once Redis is back.
func TestStoreDownModes(t *testing.T) {
	srv := redistest.Start(t)
	var transitions sync.Map
	cfg := cluster.Config{KeyPrefix: "t6", RetryInterval: 30 * time.Millisecond,
		OnTransition: func(id string, degraded bool) {
			v, _ := transitions.LoadOrStore(id, new(atomic.Int64))
			v.(*atomic.Int64).Add(1)
		}}
	r := newReplica(t, srv, cfg)
	p := resilience.Policy{PermitLimit: 4, Window: time.Hour, ExpectedReplicas: 2}
	local, _ := r.store.Window("m.local", p)
	p.OnStoreError = "open"
	open, _ := r.store.Window("m.open", p)
	p.OnStoreError = "closed"
	closed, _ := r.store.Window("m.closed", p)
	srv.Kill()

	count := func(w resilience.SharedWindow, n int) (ok int) {
		for range n {
			if _, err := w.Take(t.Context(), inv()); err == nil {
				ok++
			}
		}
		return ok
	}
	if got := count(local, 10); got != 2 {
		t.Fatalf("local: admitted %d of 10 with Redis down, want the share ceil(4/2) = 2", got)
	}
	if got := count(open, 10); got != 10 {
		t.Fatalf("open: admitted %d of 10, want 10", got)
	}
	if got := count(closed, 10); got != 0 {
		t.Fatalf("closed: admitted %d of 10, want 0", got)
	}
	for _, id := range []string{"m.local", "m.open", "m.closed"} {
		if !r.store.Degraded(id) {
			t.Fatalf("%s not degraded with Redis down", id)
		}
	}
	srv.Restart()
	deadline := time.Now().Add(5 * time.Second)
	start := time.Now()
	for r.store.Degraded("m.closed") && time.Now().Before(deadline) {
		_, _ = closed.Take(t.Context(), inv())
		time.Sleep(5 * time.Millisecond)
	}
	if r.store.Degraded("m.closed") {
		t.Fatal("not recovered 5 s after Redis came back")
	}
	if _, err := closed.Take(t.Context(), inv()); err != nil {
		t.Fatalf("after recovery: %v", err)
	}
	v, _ := transitions.Load("m.closed")
	if n := v.(*atomic.Int64).Load(); n != 2 {
		t.Fatalf("m.closed had %d transitions, want 2 (degraded, recovered)", n)
	}
	t.Logf("recovered %v after Redis restarted", time.Since(start))
}

// TestPausedStoreCostsAtMostStoreTimeout: a paused Redis costs a call at
// most StoreTimeout, and is not the call's TIMEOUT: the first calls are
// turned away (one failure is no evidence), and once DegradeAfter checks
// in a row have failed the local fallback admits.
func TestPausedStoreCostsAtMostStoreTimeout(t *testing.T) {
	srv := redistest.Start(t)
	r := newReplica(t, srv, cluster.Config{KeyPrefix: "t7", RetryInterval: time.Hour})
	p := resilience.Policy{PermitLimit: 100, Window: time.Hour, StoreTimeout: 30 * time.Millisecond}
	w, _ := r.store.Window("a.b", p)
	if _, err := w.Take(t.Context(), inv()); err != nil {
		t.Fatal(err)
	}
	srv.Pause(2 * time.Second)
	var worst time.Duration
	refused := 0
	for {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		start := time.Now()
		_, err := w.Take(ctx, inv())
		took := time.Since(start)
		cancel()
		worst = max(worst, took)
		// The store call ends at StoreTimeout (30 ms), not at the call's
		// deadline (1 s): a refusal or an admission, never the deadline.
		if errors.Is(err, context.DeadlineExceeded) || took >= time.Second {
			t.Fatalf("paused store: the call ended at its deadline (%v, %v), want it cut at StoreTimeout", took, err)
		}
		if err == nil {
			break
		}
		if !errors.Is(err, resilience.ErrLimited) {
			t.Fatalf("Take with a paused store: %v, want a refusal or the local fallback's admission", err)
		}
		if refused++; refused > 50 {
			t.Fatal("the local fallback admitted nothing in 50 calls: the hung store was never found out")
		}
	}
	if !r.store.Degraded("a.b") {
		t.Fatal("admitted, not degraded")
	}
	t.Logf("paused Redis cost at most %v per call for StoreTimeout 30ms; %d refused before the fallback admitted (each a refusal, none a TIMEOUT)", worst, refused)
}

// TestDegradeAfterIsBounded: a policy's DegradeAfter above 100 counts as
// 100, so a dead store is found after at most 100 checks in a row, not
// after billions of them.
func TestDegradeAfterIsBounded(t *testing.T) {
	srv := redistest.Start(t)
	r := newReplica(t, srv, cluster.Config{KeyPrefix: "t10", RetryInterval: time.Hour, DegradeAfter: math.MaxInt32})
	w, _ := r.store.Window("a.b", resilience.Policy{PermitLimit: 100, Window: time.Hour,
		StoreTimeout: time.Second, DegradeAfter: math.MaxInt32})
	srv.Kill()
	if _, err := w.Take(t.Context(), inv()); !errors.Is(err, resilience.ErrLimited) {
		t.Fatalf("Take with Redis gone: %v, want a refusal", err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for !r.store.Degraded("a.b") && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if !r.store.Degraded("a.b") {
		t.Fatal("not degraded 60 s after Redis went away: DegradeAfter is not bounded")
	}
}

// TestStoreCallBoundedByCallerDeadline: when the caller's deadline is
// nearer than StoreTimeout, the store call ends at it and the caller's
// context error is returned (the operation's TIMEOUT, truthfully).
func TestStoreCallBoundedByCallerDeadline(t *testing.T) {
	srv := redistest.Start(t)
	r := newReplica(t, srv, cluster.Config{KeyPrefix: "t8"})
	w, _ := r.store.Window("a.b", resilience.Policy{PermitLimit: 1, Window: time.Hour, StoreTimeout: time.Second})
	srv.Pause(time.Second)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := w.Take(ctx, inv())
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 200*time.Millisecond {
		t.Fatalf("Take = %v after %v, want the caller's deadline at ~20ms", err, time.Since(start))
	}
	if r.store.Degraded("a.b") {
		t.Fatal("the caller's own deadline degraded the operation")
	}
}

// TestLongStoreTimeoutIsKept: a StoreTimeout longer than a second is the
// bound of a store call. A Redis paused for 1.5 s answers a call whose
// StoreTimeout is a minute; the client's own timeouts do not cut it.
func TestLongStoreTimeoutIsKept(t *testing.T) {
	srv := redistest.Start(t)
	r := newReplica(t, srv, cluster.Config{KeyPrefix: "t11"})
	w, _ := r.store.Window("a.b", resilience.Policy{PermitLimit: 1, Window: veryLong, StoreTimeout: time.Minute})
	srv.Pause(1500 * time.Millisecond)
	start := time.Now()
	if _, err := w.Take(t.Context(), inv()); err != nil {
		t.Fatalf("Take across a 1.5 s pause with StoreTimeout 1 min: %v after %v", err, time.Since(start))
	}
	if r.store.Degraded("a.b") {
		t.Fatal("degraded by a store that answered within StoreTimeout")
	}
}

// TestReplicaCount: replicas announce themselves; Close removes one. The
// heartbeat is the default (1 s, announcements valid for three beats): a
// beat whose round trip is slow on a loaded machine misses its timeout, and
// the next one counts again.
func TestReplicaCount(t *testing.T) { onRedis(t, testReplicaCount) }

func testReplicaCount(t *testing.T, connect func() redis.UniversalClient) {
	cfg := cluster.Config{KeyPrefix: "t9"}
	a := newReplicaOn(t, connect(), cfg)
	b := newReplicaOn(t, connect(), cfg)
	replicas := func(want int) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for a.store.Replicas() != want && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		if got := a.store.Replicas(); got != want {
			t.Fatalf("replicas = %d, want %d", got, want)
		}
	}
	replicas(2)
	b.store.Close()
	replicas(1)
}

func TestParseMode(t *testing.T) {
	for in, want := range map[string]cluster.Mode{"": cluster.Local, "local": cluster.Local, "open": cluster.Open, "closed": cluster.Closed} {
		if got, err := cluster.ParseMode(in); err != nil || got != want {
			t.Errorf("ParseMode(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := cluster.ParseMode("Local"); err == nil {
		t.Error("ParseMode(Local) accepted a wrong case")
	}
}

var _ = net.Dial

type tlog struct{ t *testing.T }

func (w tlog) Write(b []byte) (int, error) { w.t.Log(string(b)); return len(b), nil }
