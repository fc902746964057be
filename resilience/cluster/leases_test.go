package cluster_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sundial-go/sundial/resilience"
	"github.com/sundial-go/sundial/resilience/cluster"
	"github.com/sundial-go/sundial/resilience/cluster/redistest"
)

// serverWindow returns the index of the window of length on the server's clock.
func serverWindow(t *testing.T, r *replica, length time.Duration) int64 {
	now, err := r.rdb.Time(context.Background()).Result()
	if err != nil {
		t.Error(err)
	}
	return now.UnixMicro() / length.Microseconds()
}

// doneHook counts the commands named name once their reply is in, but for
// the replica heartbeat's (see counted).
type doneHook struct {
	name string
	n    *atomic.Int64
}

func (h doneHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h doneHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if counted(cmd, h.name) {
			h.n.Add(1)
		}
		return err
	}
}

// counted reports whether cmd is named name and is not the heartbeat's
// (a script on the replicas key, every second, and its renewal of live
// leases): tests count the calls' own store commands.
func counted(cmd redis.Cmder, name string) bool {
	if cmd.Name() != name {
		return false
	}
	if args := cmd.Args(); len(args) > 3 {
		if k, ok := args[3].(string); ok && strings.HasSuffix(k, ":replicas") {
			return false
		}
	}
	return true
}
func (h doneHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// windowCounter runs calls on w and counts, per window index on the
// server's clock (the index the window script admitted the call in), the
// calls admitted.
type windowCounter struct {
	t      *testing.T
	r      *replica
	w      resilience.SharedWindow
	length time.Duration
	start  int64 // window indexes are counted from it
	mu     sync.Mutex
	ran    map[int64]int
}

// countedWindow starts a store on srv and the window of policy p on it,
// with its script replies counted.
func countedWindow(t *testing.T, srv *redistest.Server, prefix string, p resilience.Policy) (*replica, *windowCounter, *atomic.Int64) {
	t.Helper()
	r := newReplica(t, srv, cluster.Config{KeyPrefix: prefix})
	scripts := new(atomic.Int64)
	r.rdb.AddHook(doneHook{name: "evalsha", n: scripts})
	w, err := r.store.Window("a.b", p)
	if err != nil {
		t.Fatal(err)
	}
	return r, &windowCounter{t: t, r: r, w: w, length: p.Window, ran: map[int64]int{}}, scripts
}

// take runs a call on c's window and reports whether it was admitted.
func (c *windowCounter) take(ctx context.Context) bool { return c.takeFrom(ctx, c.w) }

// takeFrom is take on window w (another replica's view of the same one).
func (c *windowCounter) takeFrom(ctx context.Context, w resilience.SharedWindow) bool {
	_, idx, err := cluster.TakeIndexed(w, ctx)
	if err != nil {
		return false
	}
	c.mu.Lock()
	c.ran[idx-c.start]++
	c.mu.Unlock()
	return true
}

func (c *windowCounter) max() (int64, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var at int64
	most := 0
	for idx, n := range c.ran {
		if n > most {
			at, most = idx, n
		}
	}
	return at, most
}

// TestGiveBackInAnEarlierWindowStaysCounted: reservations are a count
// filled window by window, so a caller leaving from a window before the
// last one cannot be taken back without freeing a place in the last window
// (which another caller then joins). PermitLimit 1: X reserves W+1, Y W+2;
// X leaves; Z reserves W+3, not W+2 with Y (was: Y and Z both ran in W+2).
// An attempt in which X's window opened before X left is run again
// (attempts).
func TestGiveBackInAnEarlierWindowStaysCounted(t *testing.T) {
	srv := redistest.Start(t)
	p := resilience.Policy{PermitLimit: 1, Window: 400 * time.Millisecond, QueueLimit: 3, StoreTimeout: time.Second}
	attempts(t, "l1", func(prefix string) string {
		_, c, scripts := countedWindow(t, srv, prefix, p)
		ctx, cancel := context.WithCancel(t.Context())
		var wg sync.WaitGroup
		defer wg.Wait()
		defer cancel()
		if _, err := c.w.Take(ctx, inv()); err != nil { // window W
			t.Fatal(err)
		}
		xctx, xcancel := context.WithCancel(ctx)
		xran := make(chan bool, 1)
		wg.Go(func() { xran <- c.take(xctx) }) // X reserves W+1
		waitFor(t, func() bool { return scripts.Load() == 2 })
		wg.Go(func() { c.take(ctx) }) // Y reserves W+2
		waitFor(t, func() bool { return scripts.Load() == 3 })
		xcancel() // X leaves: its give-back is one more script
		if <-xran {
			return "X ran: its window opened before it left"
		}
		waitFor(t, func() bool { return scripts.Load() == 4 }) // the give-back is done
		wg.Go(func() { c.take(ctx) })                          // Z
		wg.Wait()
		if idx, n := c.max(); n > 1 {
			t.Fatalf("window %d ran %d calls, PermitLimit 1 (per window: %v)", idx, n, c.ran)
		}
		if len(c.ran) != 2 {
			t.Fatalf("Y and Z ran in %v, want two windows", c.ran)
		}
		return ""
	})
}

// TestGiveBacksDoNotOverfillTheLastWindow: three rounds of "a queued
// caller leaves, a new one comes" put no more than PermitLimit in any
// window (was: 4 calls in one window with PermitLimit 1). An attempt in
// which a leaving caller's window opened before it left is run again
// (attempts).
func TestGiveBacksDoNotOverfillTheLastWindow(t *testing.T) {
	srv := redistest.Start(t)
	p := resilience.Policy{PermitLimit: 1, Window: 300 * time.Millisecond, QueueLimit: 7, StoreTimeout: time.Second}
	attempts(t, "l2", func(prefix string) string {
		_, c, scripts := countedWindow(t, srv, prefix, p)
		ctx, cancel := context.WithCancel(t.Context())
		var wg sync.WaitGroup
		defer wg.Wait()
		defer cancel()
		if _, err := c.w.Take(ctx, inv()); err != nil {
			t.Fatal(err)
		}
		var cancels []context.CancelFunc
		var ran []chan bool
		for i := range 3 { // X1..X3 reserve W+1..W+3
			xctx, xcancel := context.WithCancel(ctx)
			x := make(chan bool, 1)
			cancels, ran = append(cancels, xcancel), append(ran, x)
			wg.Go(func() { x <- c.take(xctx) })
			waitFor(t, func() bool { return scripts.Load() == int64(2+i) })
		}
		wg.Go(func() { c.take(ctx) }) // Y reserves W+4
		waitFor(t, func() bool { return scripts.Load() == 5 })
		for i, xcancel := range cancels { // one leaves, a new one comes; three times
			xcancel()
			if <-ran[i] {
				return fmt.Sprintf("X%d ran: its window opened before it left", i+1)
			}
			waitFor(t, func() bool { return scripts.Load() == int64(6+2*i) }) // its give-back
			wg.Go(func() { c.take(ctx) })
			waitFor(t, func() bool { return scripts.Load() == int64(7+2*i) })
		}
		wg.Wait()
		if idx, n := c.max(); n > 1 {
			t.Fatalf("window %d ran %d calls, PermitLimit 1 (per window: %v)", idx, n, c.ran)
		}
		if len(c.ran) != 4 {
			t.Fatalf("Y and the three late callers ran in %v, want four windows", c.ran)
		}
		return ""
	})
}

// TestLoweringPermitLimitKeepsWindowsUsable: reservations made under
// PermitLimit 10 (two windows' worth) keep their windows when the limit
// drops to 2; the window after them admits 2 (was: the 20 reservations
// were spread 2 per window, and windows nobody ran in admitted nobody).
func TestLoweringPermitLimitKeepsWindowsUsable(t *testing.T) {
	length := 300 * time.Millisecond
	p := resilience.Policy{PermitLimit: 10, Window: length, QueueLimit: 20, StoreTimeout: time.Second}
	r, c, scripts := countedWindow(t, redistest.Start(t), "l3", p)
	w := c.w
	var wg sync.WaitGroup
	for range 30 { // 10 now, 10 reserved in W+1, 10 in W+2
		wg.Go(func() { _, _ = w.Take(t.Context(), inv()) })
	}
	waitFor(t, func() bool { return scripts.Load() == 30 })
	p.PermitLimit = 2
	if _, err := r.store.Window("a.b", p); err != nil {
		t.Fatal(err)
	}
	wg.Wait() // W+2 has opened
	admitted := 0
	for range 3 {
		ctx, cancel := context.WithTimeout(t.Context(), length+length/2)
		if _, err := w.Take(ctx, inv()); err == nil {
			admitted++
		}
		cancel()
	}
	if admitted < 2 {
		t.Fatalf("after the reserved windows, PermitLimit 2 admitted %d of 3 calls within a window and a half", admitted)
	}
}

// TestRaisingPermitLimitDoesNotOverfill: raising PermitLimit 2 -> 10
// with reservations in W+1..W+3 puts at most 10 in any window (was: 12 in
// one, its 2 sleepers and 10 new calls).
func TestRaisingPermitLimitDoesNotOverfill(t *testing.T) {
	length := 400 * time.Millisecond
	p := resilience.Policy{PermitLimit: 2, Window: length, QueueLimit: 6, StoreTimeout: time.Second}
	r, c, scripts := countedWindow(t, redistest.Start(t), "l4", p)
	start := serverWindow(t, r, length)
	var wg sync.WaitGroup
	for range 8 { // 2 now, 2 reserved in each of W+1, W+2, W+3
		wg.Go(func() { c.take(t.Context()) })
	}
	waitFor(t, func() bool { return scripts.Load() == 8 })
	p.PermitLimit = 10
	_, _ = r.store.Window("a.b", p)
	for serverWindow(t, r, length) < start+2 { // into W+2
		time.Sleep(5 * time.Millisecond)
	}
	for range 12 {
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		c.take(ctx)
		cancel()
	}
	wg.Wait()
	if idx, n := c.max(); n > 10 {
		t.Fatalf("window %d ran %d calls; PermitLimit was 2, then 10 (per window: %v)", idx, n, c.ran)
	}
}

// TestNewCallQueuesBehindWaiters: the local queue is first come, first
// served — a new call of the process does not take a slot freed for the
// head (was: it asked the store first and got it, the waiter waited on).
func TestNewCallQueuesBehindWaiters(t *testing.T) {
	srv := redistest.Start(t)
	p := resilience.Policy{ConcurrencyLimit: 1, ConcurrencyQueueLimit: 1, StoreTimeout: time.Second}
	r1 := newReplica(t, srv, cluster.Config{KeyPrefix: "l5", PollInterval: time.Hour})
	r2 := newReplica(t, srv, cluster.Config{KeyPrefix: "l5"})
	s1, _ := r1.store.Slots("a.b", p)
	s2, _ := r2.store.Slots("a.b", p)
	hold, err := s2.Acquire(t.Context(), inv())
	if err != nil {
		t.Fatal(err)
	}
	waiter, cancelWaiter := context.WithCancel(t.Context())
	waiterDone := make(chan error, 1)
	go func() {
		rel, err := s1.Acquire(waiter, inv())
		if rel != nil {
			rel()
		}
		waiterDone <- err
	}()
	waitFor(t, func() bool { return cluster.QueueDepth(s1) == 1 })
	hold()
	waitFor(t, func() bool { n, _ := srv.Do("ZCARD", "{l5:a.b}:c"); return n == "0" })
	// The slot is free in the store; the head polls only hourly.
	if rel, err := s1.Acquire(t.Context(), inv()); !errors.Is(err, resilience.ErrLimited) {
		if rel != nil {
			rel()
		}
		t.Fatalf("a new call while one waits with ConcurrencyQueueLimit 1: %v, want ErrLimited", err)
	}
	cancelWaiter()
	if err := <-waiterDone; !errors.Is(err, context.Canceled) {
		t.Fatalf("waiter: %v", err)
	}
}

// TestLateAcquireReplyLeavesNoLease: a slot taken by the script whose reply
// came after StoreTimeout (a slow link) is removed again; the call ran on
// the fallback and another replica gets the slot (was: the lease blocked
// it cluster-wide until the deadline plus the grace).
func TestLateAcquireReplyLeavesNoLease(t *testing.T) {
	srv := redistest.Start(t)
	p := resilience.Policy{ConcurrencyLimit: 1, StoreTimeout: 50 * time.Millisecond, ExpectedReplicas: 1}
	st, slow, _ := lateAcquire(t, srv, "l6", p, nil)
	slow.Store(false)
	if !st.Degraded("a.b") {
		t.Fatal("not degraded by a late reply")
	}
	waitFor(t, func() bool { n, _ := srv.Do("ZCARD", "{l6:a.b}:c"); return n == "0" })
	r2 := newReplica(t, srv, cluster.Config{KeyPrefix: "l6"})
	s2, _ := r2.store.Slots("a.b", p)
	rel2, err := s2.Acquire(t.Context(), inv())
	if err != nil {
		t.Fatalf("nothing runs, yet another replica is refused: %v", err)
	}
	rel2()
}

// TestLostGiveUpIsTriedAgain: a give-up that cannot reach Redis within its
// StoreTimeout is tried again until it lands. The client has one
// connection: the late reply of the acquire closes it, and the handshake
// of a new one is answered late too. So the first give-up never leaves
// the process, and only a later try removes the lease. An attempt whose
// acquire itself did not reach Redis (its one connection was busy) does
// not count (attempts).
func TestLostGiveUpIsTriedAgain(t *testing.T) {
	srv := redistest.Start(t)
	attempts(t, "l14", func(prefix string) string {
		slow := new(atomic.Bool)
		rdb := cluster.NewClient(&redis.Options{Addr: startDelayProxy(t, srv.Addr(), slow, 200*time.Millisecond, nil), PoolSize: 1})
		st := cluster.New(rdb, cluster.Config{KeyPrefix: prefix, RetryInterval: 10 * time.Millisecond, DegradeAfter: 1,
			Heartbeat: time.Hour})
		defer func() { st.Close(); rdb.Close() }()
		if err := st.Load(t.Context()); err != nil {
			t.Fatal(err)
		}
		s, _ := st.Slots("a.b", resilience.Policy{ConcurrencyLimit: 1, StoreTimeout: 50 * time.Millisecond, ExpectedReplicas: 1})
		slow.Store(true)
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		rel, err := s.Acquire(ctx, inv())
		if err != nil {
			t.Fatalf("slow store: %v", err)
		}
		rel()
		key := "{" + prefix + ":a.b}:c"
		if n, _ := srv.Do("ZCARD", key); n != "1" {
			return "the acquire did not reach Redis: " + n + " leases"
		}
		time.Sleep(300 * time.Millisecond) // give-ups fail meanwhile
		slow.Store(false)
		waitFor(t, func() bool { n, _ := srv.Do("ZCARD", key); return n == "0" })
		return ""
	})
}

// startDelayProxy forwards to addr; while slow is set, replies are
// delayed by d (commands reach Redis at once) — or, with request set, the
// requests it matches are, on their way to Redis.
func startDelayProxy(t *testing.T, addr string, slow *atomic.Bool, d time.Duration, request func([]byte) bool) string {
	delay := func(match func([]byte) bool) func([]byte) time.Duration {
		return func(b []byte) time.Duration {
			if slow.Load() && match(b) {
				return d
			}
			return 0
		}
	}
	never := func([]byte) bool { return false }
	if request != nil {
		return startProxy(t, addr, delay(request), delay(never))
	}
	return startProxy(t, addr, delay(never), delay(func([]byte) bool { return true }))
}

// startProxy forwards every connection it accepts to addr, and returns
// its address. Each chunk read on the way to Redis waits request(chunk)
// before it is written on, each chunk on the way back reply(chunk): a
// delay holds up that connection only.
func startProxy(t *testing.T, addr string, request, reply func([]byte) time.Duration) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", addr)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, s)
			mu.Unlock()
			pipe := func(from, to net.Conn, delay func([]byte) time.Duration) {
				defer to.Close()
				buf := make([]byte, 64<<10)
				for {
					n, err := from.Read(buf)
					if n > 0 {
						if d := delay(buf[:n]); d > 0 {
							time.Sleep(d)
						}
						if _, werr := to.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}
			wg.Go(func() { pipe(c, s, request) })
			wg.Go(func() { pipe(s, c, reply) })
		}
	})
	return ln.Addr().String()
}

// TestStragglerKeepsItsClusterSlot: a call running past its deadline (the
// kernel lets it run on) keeps its slot until it returns — the heartbeat
// renews its lease — and frees it when it does (was: another call got
// the slot at its deadline plus the grace).
func TestStragglerKeepsItsClusterSlot(t *testing.T) {
	srv := redistest.Start(t)
	// Beats whose round trips a loaded machine may slow: a lease renewed
	// to 2 s ahead every 500 ms outlasts three failed renewals in a row.
	r := newReplica(t, srv, cluster.Config{KeyPrefix: "l7", LeaseGrace: time.Second, Heartbeat: 500 * time.Millisecond})
	s, _ := r.store.Slots("a.b", resilience.Policy{ConcurrencyLimit: 1, StoreTimeout: time.Minute})
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	rel, err := s.Acquire(ctx, inv())
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(start.Add(3 * time.Second))) // deadline + grace, twice over
	short, cancelShort := context.WithTimeout(t.Context(), 50*time.Millisecond)
	rel2, err := s.Acquire(short, inv())
	cancelShort()
	if err == nil {
		rel2()
		t.Fatal("a second call was admitted while the first still runs past its deadline, ConcurrencyLimit 1")
	}
	rel()
	waitFor(t, func() bool { n, _ := srv.Do("ZCARD", "{l7:a.b}:c"); return n == "0" })
	rel3, err := s.Acquire(t.Context(), inv())
	if err != nil {
		t.Fatalf("the straggler returned, its slot is still held: %v", err)
	}
	rel3()
}

// TestRecoveryCountsFallbackCalls: calls the Local fallback admitted while
// the store was down still count once it answers again (was: a third call
// of one replica ran at once with ConcurrencyLimit 2).
func TestRecoveryCountsFallbackCalls(t *testing.T) {
	srv := redistest.Start(t)
	r := newReplica(t, srv, cluster.Config{KeyPrefix: "l8", RetryInterval: 10 * time.Millisecond, DegradeAfter: 1})
	s, _ := r.store.Slots("a.b", resilience.Policy{ConcurrencyLimit: 2, StoreTimeout: 200 * time.Millisecond, ExpectedReplicas: 1})
	srv.Kill()
	var rels []func()
	for range 2 {
		rel, err := s.Acquire(t.Context(), inv())
		if err != nil {
			t.Fatal(err)
		}
		rels = append(rels, rel)
	}
	srv.Restart()
	deadline := time.Now().Add(3 * time.Second)
	for r.store.Degraded("a.b") && time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
		if rel, err := s.Acquire(ctx, inv()); err == nil {
			rels = append(rels, rel)
		}
		cancel()
		time.Sleep(10 * time.Millisecond)
	}
	if r.store.Degraded("a.b") {
		t.Fatal("still degraded after the store came back")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	if rel, err := s.Acquire(ctx, inv()); err == nil {
		rels = append(rels, rel)
	}
	cancel()
	if len(rels) > 2 {
		t.Fatalf("%d running at once in one replica, ConcurrencyLimit 2", len(rels))
	}
	rels[0]() // a fallback call returns: the store has a slot for a new one
	rel, err := s.Acquire(t.Context(), inv())
	if err != nil {
		t.Fatalf("after a fallback call returned: %v", err)
	}
	rel()
	rels[1]()
}

// TestShortDeadlinesStillDegrade: callers whose deadlines are all shorter
// than StoreTimeout still find a hung store out — a check bounded by
// StoreTimeout alone degrades the operation and OnStoreError applies while
// the store is still hung (was: every call spent its deadline on the store
// and the operation never degraded).
func TestShortDeadlinesStillDegrade(t *testing.T) {
	srv := redistest.Start(t)
	r := newReplica(t, srv, cluster.Config{KeyPrefix: "l9"})
	w, _ := r.store.Window("a.b", resilience.Policy{PermitLimit: 100, Window: time.Hour,
		StoreTimeout: 300 * time.Millisecond, OnStoreError: "open"})
	const pause = 2 * time.Second
	start := time.Now()
	srv.Pause(pause)
	var admitted time.Duration
	for time.Since(start) < pause-200*time.Millisecond {
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		_, err := w.Take(ctx, inv())
		cancel()
		if err == nil {
			admitted = time.Since(start)
			break
		}
	}
	if admitted == 0 || !r.store.Degraded("a.b") {
		t.Fatalf("store hung for %v, StoreTimeout 300ms, callers with 100 ms deadlines: degraded %v, none admitted by OnStoreError open",
			pause, r.store.Degraded("a.b"))
	}
	t.Logf("OnStoreError applied %v into a %v hang (StoreTimeout 300ms, deadlines 100ms)", admitted, pause)
}

// TestMixedPermitLimitsKeepThroughput: two replicas that disagree on
// PermitLimit (2 and 10: a rolling reload), their calls alternating in the
// store, fill each window to at least the smaller limit and never past the
// larger (was: every alternation rounded the reservations up to whole
// windows, and the operation ran one call per window). Calls are counted
// in the window the script admitted them in. The 24 calls need not be
// answered in one window: reservations fill windows at the far end of the
// queue, so a window that opens mid-burst is filled all the same (with
// 10 ms windows, a burst answered over 4 of them passes).
func TestMixedPermitLimitsKeepThroughput(t *testing.T) {
	srv := redistest.Start(t)
	length := 200 * time.Millisecond
	pa := resilience.Policy{PermitLimit: 2, Window: length, QueueLimit: 200, // the queue estimate counts a full window as the caller's limit
		StoreTimeout: time.Second}
	pb := pa
	pb.PermitLimit = 10
	ra, wa, wb, scripts := twoReplicaWindows(t, srv, "l10", pa, pb)
	c := &windowCounter{t: t, r: ra, length: length, start: serverWindow(t, ra, length), ran: map[int64]int{}}
	var wg sync.WaitGroup
	for i := range 24 {
		w := wa
		if i%2 == 1 {
			w = wb
		}
		wg.Go(func() { c.takeFrom(t.Context(), w) })
		waitFor(t, func() bool { return scripts.Load() == int64(i+1) }) // the replicas alternate in the store
	}
	wg.Wait()
	if idx, n := c.max(); n > 10 {
		t.Fatalf("window +%d ran %d calls, limits 2 and 10 (per window: %v)", idx, n, c.ran)
	}
	for i := int64(1); i <= 3; i++ {
		if c.ran[i] < 2 {
			t.Fatalf("window +%d ran %d calls, limits 2 and 10 (per window: %v)", i, c.ran[i], c.ran)
		}
	}
}

// TestReleasesDoNotWaitForEachOther: slots given back while the store hangs
// are removed side by side, each bounded by StoreTimeout, so Close waits
// about one StoreTimeout (was: one after another, 40 × StoreTimeout). The
// slots are taken with a StoreTimeout no loaded machine reaches; a reload
// then sets 500 ms. One after another, the 40 releases would take at least
// 20 s on any schedule; Close must take less than half that.
func TestReleasesDoNotWaitForEachOther(t *testing.T) {
	srv := redistest.Start(t)
	r := newReplica(t, srv, cluster.Config{KeyPrefix: "l11"})
	p := resilience.Policy{ConcurrencyLimit: 40, StoreTimeout: time.Minute}
	s, _ := r.store.Slots("a.b", p)
	rels := acquireN(t, s, 40)
	p.StoreTimeout = 500 * time.Millisecond
	if _, err := r.store.Slots("a.b", p); err != nil {
		t.Fatal(err)
	}
	srv.Pause(time.Minute)
	for _, rel := range rels {
		rel()
	}
	start := time.Now()
	r.store.Close()
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("Close waited %v for 40 releases with StoreTimeout 500ms", d)
	}
	t.Logf("Close waited %v for 40 releases with StoreTimeout 500ms", time.Since(start))
}

// TestLateAcquireRequestTakesNothing: an acquire whose request reaches
// Redis after its caller gave up (a slow link on the way there) finds the
// tombstone the give-up left and takes nothing (was: the give-up's ZREM
// overtook it, and the lease it then added blocked the slot cluster-wide
// until the deadline plus the grace).
func TestLateAcquireRequestTakesNothing(t *testing.T) {
	srv := redistest.Start(t)
	// The acquire script's request: EVALSHA sha 2 keys limit member lease,
	// 8 elements (the give-up's has 7).
	acquires := func(b []byte) bool {
		return bytes.HasPrefix(b, []byte("*8\r\n$7\r\nevalsha")) && bytes.Contains(b, []byte("}:c"))
	}
	p := resilience.Policy{ConcurrencyLimit: 1, StoreTimeout: 50 * time.Millisecond, ExpectedReplicas: 1}
	_, slow, _ := lateAcquire(t, srv, "l12", p, acquires)
	// The give-up has landed once its tombstone is there. From then on no
	// lease is left, whichever came first: the give-up removes a lease the
	// acquire took, and a later acquire takes nothing. The late acquire
	// reaches Redis 200 ms after it was sent.
	waitFor(t, func() bool {
		n, _ := srv.Do("EVAL", "return #redis.call('KEYS', ARGV[1])", "0", "{l12:a.b}:c:x:*")
		return n == "1"
	})
	time.Sleep(300 * time.Millisecond)
	slow.Store(false)
	if n, _ := srv.Do("ZCARD", "{l12:a.b}:c"); n != "0" {
		t.Fatalf("leases in the store after the late acquire: %s, want 0", n)
	}
}

// lateAcquire starts a store on srv through a proxy that, while slow,
// delays replies by 200 ms (request nil) or the requests request matches,
// and takes and gives back one slot of policy p while slow: the store
// call times out (StoreTimeout below 200 ms) and the fallback admits. It
// returns the store, the proxy's switch (still on) and the count of
// script replies.
func lateAcquire(t *testing.T, srv *redistest.Server, prefix string, p resilience.Policy, request func([]byte) bool) (*cluster.Store, *atomic.Bool, *atomic.Int64) {
	t.Helper()
	slow, scripts := new(atomic.Bool), new(atomic.Int64)
	rdb := cluster.NewClient(&redis.Options{Addr: startDelayProxy(t, srv.Addr(), slow, 200*time.Millisecond, request)})
	rdb.AddHook(doneHook{name: "evalsha", n: scripts})
	// One late reply degrades here: these tests are about what the late
	// script leaves in the store.
	st := cluster.New(rdb, cluster.Config{KeyPrefix: prefix, RetryInterval: 10 * time.Millisecond, DegradeAfter: 1})
	t.Cleanup(func() { st.Close(); rdb.Close() })
	if err := st.Load(t.Context()); err != nil {
		t.Fatal(err)
	}
	s1, _ := st.Slots("a.b", p)
	slow.Store(true)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	rel, err := s1.Acquire(ctx, inv())
	if err != nil {
		t.Fatalf("slow store: %v", err)
	}
	rel()
	return st, slow, scripts
}

// TestFullWindowStaysFullUnderAnyLimit: a window reserved full by a
// replica with PermitLimit 10, first reached in the store by a call of a
// replica with PermitLimit 2, admits nobody more from either (was: the
// first caller's limit became its count — 2 — and the limit-10 replica
// admitted 8 more: 18 in one window). An attempt whose first 21 calls were
// not all answered in one window is run again (attempts).
func TestFullWindowStaysFullUnderAnyLimit(t *testing.T) {
	srv := redistest.Start(t)
	length := time.Second
	pa := resilience.Policy{PermitLimit: 10, Window: length, QueueLimit: 50, StoreTimeout: time.Second}
	pb := pa
	pb.PermitLimit = 2
	attempts(t, "l13", func(prefix string) string {
		ra, wa, wb, scripts := twoReplicaWindows(t, srv, prefix, pa, pb)
		c := &windowCounter{t: t, r: ra, length: length, start: serverWindow(t, ra, length), ran: map[int64]int{}}
		actx, cancel := context.WithCancel(t.Context())
		var wg sync.WaitGroup
		defer wg.Wait()
		defer cancel()
		take := func(w resilience.SharedWindow) {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(actx, 3*length)
				defer cancel()
				c.takeFrom(ctx, w)
			})
		}
		for range 21 { // 10 now, 10 reserved in W+1 (full), 1 in W+2
			take(wa)
		}
		waitFor(t, func() bool { return scripts.Load() == 21 })
		if now := serverWindow(t, ra, length); now != c.start {
			return fmt.Sprintf("the 21 calls were answered from window +0 to +%d", now-c.start)
		}
		for serverWindow(t, ra, length) == c.start {
			time.Sleep(5 * time.Millisecond)
		}
		take(wb) // the first call in W+1 is of the limit-2 replica
		waitFor(t, func() bool { return scripts.Load() == 22 })
		for range 8 {
			take(wa)
		}
		wg.Wait()
		if idx, n := c.max(); n > 10 {
			t.Fatalf("window +%d ran %d calls, limits 2 and 10 (per window: %v)", idx, n, c.ran)
		}
		return ""
	})
}

// TestReloadDuringAcquireAsksAgain: a slot granted by a store call that was
// on its way when a reload came is given back and asked for again at once
// under the new limits — not turned away (was: ErrLimited with 0 of 5,
// then 10, slots held).
func TestReloadDuringAcquireAsksAgain(t *testing.T) {
	srv := redistest.Start(t)
	r := newReplica(t, srv, cluster.Config{KeyPrefix: "l14"})
	var scripts atomic.Int64
	r.rdb.AddHook(cmdHook{name: "evalsha", n: &scripts})
	p := resilience.Policy{ConcurrencyLimit: 5, StoreTimeout: 2 * time.Second}
	s, _ := r.store.Slots("a.b", p)
	srv.Pause(300 * time.Millisecond)
	done := make(chan error, 1)
	go func() {
		rel, err := s.Acquire(t.Context(), inv())
		if rel != nil {
			defer rel()
		}
		done <- err
	}()
	waitFor(t, func() bool { return scripts.Load() == 1 }) // the acquire is sent; the store is paused
	p.ConcurrencyLimit = 10
	if _, err := r.store.Slots("a.b", p); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("acquire with 0 of 5 (then 10) slots held: %v", err)
	}
}

// TestHugeWindowWaitDoesNotOverflow: with a window of a billion seconds,
// reservations wait (the wait saturates) instead of wrapping into the past
// and running at once.
func TestHugeWindowWaitDoesNotOverflow(t *testing.T) {
	srv := redistest.Start(t)
	r := newReplica(t, srv, cluster.Config{KeyPrefix: "l15"})
	w, _ := r.store.Window("a.b", resilience.Policy{PermitLimit: 1, Window: 1e9 * time.Second, QueueLimit: 20, StoreTimeout: time.Second})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var admitted atomic.Int64
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for range 12 {
		wg.Go(func() {
			if _, err := w.Take(ctx, inv()); err == nil {
				admitted.Add(1)
			}
		})
	}
	// 11 reserved: 10 windows reserved full, 1 in the window after them.
	waitFor(t, func() bool { n, _ := srv.Do("HGET", "{l15:a.b}:w:1000000000000000", "f"); return n == "10" })
	if n := admitted.Load(); n != 1 {
		t.Fatalf("%d calls admitted, PermitLimit 1 in a window of 1e9 s", n)
	}
}

// twoReplicaWindows starts two replicas on srv with the windows of policies
// pa and pb (one length), their script replies counted together.
func twoReplicaWindows(t *testing.T, srv *redistest.Server, prefix string, pa, pb resilience.Policy) (*replica, resilience.SharedWindow, resilience.SharedWindow, *atomic.Int64) {
	t.Helper()
	scripts := new(atomic.Int64)
	ra := newReplica(t, srv, cluster.Config{KeyPrefix: prefix})
	rb := newReplica(t, srv, cluster.Config{KeyPrefix: prefix})
	ra.rdb.AddHook(doneHook{name: "evalsha", n: scripts})
	rb.rdb.AddHook(doneHook{name: "evalsha", n: scripts})
	wa, _ := ra.store.Window("a.b", pa)
	wb, _ := rb.store.Window("a.b", pb)
	return ra, wa, wb, scripts
}
