package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
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

// onRedis runs f as two subtests: against a single redis-server, and
// against the shared Redis Cluster (three masters, a replica each).
// connect returns a new client set up like the kernel's; the caller
// closes it (newReplicaOn does). Every script of the store runs on the
// cluster, which refuses one that touches keys of two slots.
func onRedis(t *testing.T, f func(t *testing.T, connect func() redis.UniversalClient)) {
	t.Run("single", func(t *testing.T) {
		srv := redistest.Start(t)
		f(t, func() redis.UniversalClient { return cluster.NewClient(&redis.Options{Addr: srv.Addr()}) })
	})
	t.Run("cluster", func(t *testing.T) {
		c := redistest.SharedCluster(t)
		// The shared cluster outlives a run (go test -count): its 1e9 s
		// windows would still be spent.
		if err := c.Each(func(s *redistest.Server) error { _, err := s.Do("FLUSHALL"); return err }); err != nil {
			t.Fatal(err)
		}
		f(t, func() redis.UniversalClient {
			return cluster.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
		})
	})
}

// veryLong is a window no test run crosses: windows are aligned to its
// multiples on the server's clock, and the next boundary is in 2033.
const veryLong = 1e9 * time.Second

// perKey is a cluster-scoped policy whose only limit is n per window per key.
// Its StoreTimeout is one no round trip of a loaded machine reaches: a call
// refused for a slow reply would make an exact count fall short.
func perKey(n int, window time.Duration, queue int) resilience.Policy {
	return resilience.Policy{Scope: resilience.ScopeCluster, StoreTimeout: time.Minute,
		PerKey: resilience.PerKey{PermitLimit: n, Window: window, QueueLimit: queue}}
}

// keyedReplicas returns n replicas' keyed windows of operation id under p.
func keyedReplicas(t *testing.T, connect func() redis.UniversalClient, n int, prefix, id string, p resilience.Policy) ([]*replica, []resilience.SharedKeyedWindow) {
	t.Helper()
	var rs []*replica
	var ws []resilience.SharedKeyedWindow
	for range n {
		r := newReplicaOn(t, connect(), cluster.Config{KeyPrefix: prefix})
		w, err := r.store.KeyedWindow(id, p)
		if err != nil {
			t.Fatal(err)
		}
		rs, ws = append(rs, r), append(ws, w)
	}
	return rs, ws
}

// keyedKey is the Redis key of key's window under prefix and operation id.
func keyedKey(prefix, id, key string, window time.Duration) string {
	return "{" + prefix + ":" + id + "|" + key + "}:w:" + strconv.FormatInt(window.Microseconds(), 10)
}

// TestKeyedWindowPerKeyAcrossReplicas: three replicas, 10 per window per
// key, 50 keys and 15 calls of each: exactly 10 of every key are
// admitted across the replicas, and the server's own record of each key
// (its window and the permits used) says the same. On a Redis Cluster the
// keys spread over every master.
func TestKeyedWindowPerKeyAcrossReplicas(t *testing.T) {
	onRedis(t, func(t *testing.T, connect func() redis.UniversalClient) {
		const prefix, id, keys, calls = "k1", "orders.create", 50, 15
		p := perKey(10, veryLong, 0)
		rs, ws := keyedReplicas(t, connect, 3, prefix, id, p)
		var admitted [keys]atomic.Int64
		var wg sync.WaitGroup
		sem := make(chan struct{}, 48) // concurrent, without a pile-up on the clients' pools
		for k := range keys {
			for i := range calls {
				sem <- struct{}{}
				wg.Go(func() {
					defer func() { <-sem }()
					retry, err := ws[(k+i)%3].Wait(t.Context(), "tenant-"+strconv.Itoa(k))
					switch {
					case err == nil:
						admitted[k].Add(1)
					case !errors.Is(err, resilience.ErrLimited) || retry <= 0:
						t.Errorf("key %d: Wait = %v, %v; want ErrLimited with a retry-after", k, retry, err)
					}
				})
			}
		}
		wg.Wait()
		windows := map[string]bool{}
		for k := range keys {
			if got := admitted[k].Load(); got != 10 {
				t.Errorf("key %d: admitted %d of %d across 3 replicas, want exactly 10", k, got, calls)
			}
			rec, err := rs[0].rdb.HMGet(t.Context(), keyedKey(prefix, id, "tenant-"+strconv.Itoa(k), p.PerKey.Window), "w", "u").Result()
			if err != nil {
				t.Fatal(err)
			}
			windows[fmt.Sprint(rec[0])] = true
			if rec[1] != "10" {
				t.Errorf("key %d: the store counts %v permits in window %v, want 10", k, rec[1], rec[0])
			}
		}
		if len(windows) != 1 {
			t.Errorf("keys in windows %v, want one", windows)
		}
		if cc, ok := rs[0].rdb.(*redis.ClusterClient); ok {
			var mu sync.Mutex
			var masters []int
			err := cc.ForEachMaster(t.Context(), func(ctx context.Context, c *redis.Client) error {
				n, err := c.Eval(ctx, `return #redis.call('KEYS', ARGV[1])`, nil, "{"+prefix+":*").Int()
				mu.Lock()
				masters = append(masters, n)
				mu.Unlock()
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range masters {
				if n == 0 {
					t.Errorf("keys per master %v: want the 50 keys spread over every master", masters)
				}
			}
			t.Logf("keys per master: %v", masters)
		}
	})
}

// TestKeyedWindowQueueRules: a key's queue follows the window's rules. A
// call whose reserved window would open after its deadline is turned
// away; one without a deadline reserves a place and sleeps; with the
// queue (1) full the next is turned away; a sleeper that leaves gives its
// place back. Other keys are not affected.
func TestKeyedWindowQueueRules(t *testing.T) {
	onRedis(t, func(t *testing.T, connect func() redis.UniversalClient) {
		const prefix, id = "k2", "a.b"
		p := perKey(1, veryLong, 1)
		rs, ws := keyedReplicas(t, connect, 2, prefix, id, p)
		key := keyedKey(prefix, id, "acme", veryLong)
		if _, err := ws[0].Wait(t.Context(), "acme"); err != nil {
			t.Fatalf("first call: %v", err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		if _, err := ws[1].Wait(ctx, "acme"); !errors.Is(err, resilience.ErrLimited) {
			t.Fatalf("second call, its window opens after its deadline: %v, want ErrLimited", err)
		}
		sleeper, leave := context.WithCancel(t.Context())
		slept := make(chan error, 1)
		go func() { _, err := ws[1].Wait(sleeper, "acme"); slept <- err }()
		waitField(t, rs[0].rdb, key, "o", "1")
		if retry, err := ws[0].Wait(t.Context(), "acme"); !errors.Is(err, resilience.ErrLimited) || retry <= 0 {
			t.Fatalf("with the queue full: %v, %v; want ErrLimited", retry, err)
		}
		if _, err := ws[0].Wait(t.Context(), "globex"); err != nil {
			t.Fatalf("another key: %v", err)
		}
		leave()
		if err := <-slept; !errors.Is(err, context.Canceled) {
			t.Fatalf("the sleeper that left: %v, want context.Canceled", err)
		}
		waitField(t, rs[0].rdb, key, "o", "0")
	})
}

// waitField polls the hash field of key until it is want (bounded).
func waitField(t *testing.T, rdb redis.UniversalClient, key, field, want string) {
	t.Helper()
	var got string
	for range 500 {
		if got = rdb.HGet(t.Context(), key, field).Val(); got == want {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("%s %s = %q, want %q", key, field, got, want)
}

// TestKeyedWindowRejectsBadKeys: a key of a megabyte, or one that would
// end the hash tag, is refused before any store call, and is not
// ErrLimited (the caller is at fault, not the limit).
func TestKeyedWindowRejectsBadKeys(t *testing.T) {
	srv := redistest.Start(t)
	r := newReplica(t, srv, cluster.Config{KeyPrefix: "k3"})
	w, err := r.store.KeyedWindow("a.b", perKey(5, time.Minute, 0))
	if err != nil {
		t.Fatal(err)
	}
	before := r.calls.Load()
	for name, key := range map[string]string{
		"a megabyte": strings.Repeat("x", 1<<20),
		"brace":      "acme}:w:1",
		"newline":    "acme\r\nFLUSHALL",
	} {
		if _, err := w.Wait(t.Context(), key); err == nil || errors.Is(err, resilience.ErrLimited) {
			t.Errorf("%s: Wait = %v, want an error that is not ErrLimited", name, err)
		}
	}
	if n := r.calls.Load() - before; n != 0 {
		t.Fatalf("%d store calls for refused keys, want 0", n)
	}
	if _, err := w.Wait(t.Context(), ""); err != nil {
		t.Fatalf("the empty key (calls without one share it): %v", err)
	}
	if _, err := r.store.KeyedWindow("a|b", perKey(5, time.Minute, 0)); err == nil {
		t.Fatal(`KeyedWindow("a|b") accepted an ID that could collide with another's keys`)
	}
}

// TestKeyedWindowStoreDownModes: with Redis gone, each key gets what
// OnStoreError says: "local" its share, "open" everything, "closed"
// nothing.
func TestKeyedWindowStoreDownModes(t *testing.T) {
	srv := redistest.Start(t)
	r := newReplica(t, srv, cluster.Config{KeyPrefix: "k4", RetryInterval: time.Hour})
	windows := map[string]resilience.SharedKeyedWindow{}
	for _, mode := range []string{"local", "open", "closed"} {
		p := perKey(4, time.Hour, 0)
		p.OnStoreError, p.ExpectedReplicas = mode, 2
		w, err := r.store.KeyedWindow("m."+mode, p)
		if err != nil {
			t.Fatal(err)
		}
		windows[mode] = w
	}
	srv.Kill()
	for mode, want := range map[string]int{"local": 2, "open": 10, "closed": 0} {
		for _, key := range []string{"acme", "globex"} {
			ok := 0
			for range 10 {
				if _, err := windows[mode].Wait(t.Context(), key); err == nil {
					ok++
				} else if !errors.Is(err, resilience.ErrLimited) {
					t.Fatalf("%s: %v", mode, err)
				}
			}
			if ok != want {
				t.Errorf("%s, key %s: admitted %d of 10 with Redis down, want %d", mode, key, ok, want)
			}
		}
	}
}

// TestKeyedKeysAreBounded: each key's record expires by itself within
// three windows of its last call, so a flood of new keys costs Redis
// memory in proportion to the window's length; the bytes per key are
// measured with MEMORY USAGE and INFO memory (docs/cluster.md).
func TestKeyedKeysAreBounded(t *testing.T) {
	srv := redistest.Start(t)
	r := newReplica(t, srv, cluster.Config{KeyPrefix: "k5"})
	const window, n = time.Minute, 10_000
	w, err := r.store.KeyedWindow("orders.create", perKey(10, window, 0))
	if err != nil {
		t.Fatal(err)
	}
	before := usedMemory(t, r.rdb)
	sem := make(chan struct{}, 32)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			// A call whose store call took longer than StoreTimeout (a
			// loaded machine) is turned away without degrading: ask
			// again. Each key's first call is under its limit of 10.
			for try := 1; ; try++ {
				_, err := w.Wait(t.Context(), fmt.Sprintf("tenant-%08d", i))
				if err == nil {
					return
				}
				if !errors.Is(err, resilience.ErrLimited) || try == 5 {
					t.Errorf("Wait, try %d: %v", try, err)
					return
				}
			}
		})
	}
	wg.Wait()
	after := usedMemory(t, r.rdb)
	key := keyedKey("k5", "orders.create", "tenant-00000042", window)
	usage, err := r.rdb.MemoryUsage(t.Context(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	pttl, err := r.rdb.PTTL(t.Context(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	if pttl <= 0 || pttl > 3*window {
		t.Fatalf("a key expires in %v, want within 3 windows (%v)", pttl, 3*window)
	}
	perKey := (after - before) / n
	if usage > 256 || perKey > 512 {
		t.Fatalf("MEMORY USAGE %d bytes, %d bytes per key in INFO memory; want at most 256 and 512", usage, perKey)
	}
	t.Logf("%d keys: MEMORY USAGE %d bytes per key (key name %d bytes), INFO used_memory +%d bytes per key; expiry %v for a %v window",
		n, usage, len(key), perKey, pttl.Round(time.Second), window)
}

func usedMemory(t *testing.T, rdb redis.UniversalClient) int64 {
	t.Helper()
	info, err := rdb.Info(t.Context(), "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	t.Fatal("no used_memory in INFO memory")
	return 0
}

// TestMasterFailoverMidLoad: three replicas call a per-key limit on a
// Redis Cluster while one of its masters is killed. Every call is
// answered within its bound, admitted or turned away with ErrLimited (the
// "local" fallback while the slots of the dead master have none); once
// its replica has taken over, the limit is exact again: 10 per key across
// the replicas.
func TestMasterFailoverMidLoad(t *testing.T) {
	c := redistest.StartCluster(t)
	const prefix, id = "f1", "orders.create"
	p := perKey(10, veryLong, 0)
	// StoreTimeout is the 2 s of the other load tests: on a loaded 2-core
	// machine a healthy store can take longer than 500 ms under -race,
	// and a degraded replica enforces its share (4), by design. Calls to
	// the dead master are refused at once.
	p.StoreTimeout, p.ExpectedReplicas = 2*time.Second, 3
	var transitions atomic.Int64 // degraded or recovered, any replica
	var rs []*replica
	var ws []resilience.SharedKeyedWindow
	for range 3 {
		r := newReplicaOn(t, cluster.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()}),
			cluster.Config{KeyPrefix: prefix, RetryInterval: 50 * time.Millisecond,
				OnTransition: func(string, bool) { transitions.Add(1) }})
		w, err := r.store.KeyedWindow(id, p)
		if err != nil {
			t.Fatal(err)
		}
		rs, ws = append(rs, r), append(ws, w)
	}
	const bound = 5 * time.Second // no hang: StoreTimeout, and room for a busy machine
	var calls, admitted, slow, worst atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for worker := range 6 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				start := time.Now()
				_, err := ws[worker%3].Wait(t.Context(), fmt.Sprintf("during-%d-%d", worker, i%50))
				d := time.Since(start)
				if d > bound {
					slow.Add(1)
				}
				for w := worst.Load(); int64(d) > w && !worst.CompareAndSwap(w, int64(d)); w = worst.Load() {
				}
				calls.Add(1)
				switch {
				case err == nil:
					admitted.Add(1)
				case !errors.Is(err, resilience.ErrLimited):
					t.Errorf("call during the failover: %v, want an admission or ErrLimited", err)
				}
			}
		})
	}
	for calls.Load() < 100 {
		time.Sleep(time.Millisecond)
	}
	took := c.KillMaster(t, 0)
	promoted := time.Now()
	waitRecovered(t, rs, ws, id) // the load goes on until every replica is cluster-wide again
	recovered := time.Since(promoted)
	close(stop)
	wg.Wait()
	if n := slow.Load(); n > 0 {
		t.Fatalf("%d calls took longer than %v", n, bound)
	}
	t.Logf("failover in %v, every replica cluster-wide %v after it; %d calls answered meanwhile (%d admitted), the slowest in %v",
		took.Round(time.Millisecond), recovered.Round(time.Millisecond), calls.Load(), admitted.Load(), time.Duration(worst.Load()).Round(time.Millisecond))
	// Calls in flight at the stop may have degraded a replica again; the
	// exact phase starts once a pass over the slots changes nothing.
	for pass := 0; ; pass++ {
		before := transitions.Load()
		waitRecovered(t, rs, ws, id)
		for k := range 50 {
			for r := range 3 {
				if _, err := ws[r].Wait(t.Context(), "probe-"+strconv.Itoa(k)); err != nil && !errors.Is(err, resilience.ErrLimited) {
					t.Fatal(err)
				}
			}
		}
		degraded := false
		for r := range 3 {
			degraded = degraded || rs[r].store.Degraded(id)
		}
		if !degraded && transitions.Load() == before {
			break
		}
		if pass == 20 {
			t.Fatal("the replicas kept degrading 20 passes after the failover")
		}
	}
	exact := transitions.Load()
	var after [50]atomic.Int64
	sem := make(chan struct{}, 24) // as many at once as the 6 workers and more, not a pile-up of 750 on the pool
	for k := range 50 {
		for i := range 15 {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				if _, err := ws[(k+i)%3].Wait(t.Context(), "after-"+strconv.Itoa(k)); err == nil {
					after[k].Add(1)
				} else if !errors.Is(err, resilience.ErrLimited) {
					t.Errorf("after the failover: %v", err)
				}
			})
		}
	}
	wg.Wait()
	if transitions.Load() != exact {
		t.Fatalf("a replica lost the store for more than StoreTimeout (2 s) under this load after the failover; the shared count was not in force")
	}
	for k := range 50 {
		if got := after[k].Load(); got != 10 {
			t.Errorf("after the failover, key %d: admitted %d of 15, want exactly 10", k, got)
		}
	}
	for r := range 3 {
		if rs[r].store.Degraded(id) {
			t.Errorf("replica %d degraded after the failover: the exact counts above were local", r)
		}
	}
}

// waitRecovered calls each replica's window (keys "probe-*") until its
// operation id is no longer degraded; all of them within 10 s. (go-redis
// learns a promoted replica from a MOVED reply or its reload every
// 60 s; the store has it reload the slots when a call fails.)
func waitRecovered(t *testing.T, rs []*replica, ws []resilience.SharedKeyedWindow, id string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for r := range rs {
		for i := 0; rs[r].store.Degraded(id); i++ {
			if time.Now().After(deadline) {
				t.Fatalf("replica %d still degraded 10 s after the failover", r)
			}
			_, _ = ws[r].Wait(t.Context(), "probe-"+strconv.Itoa(i%50))
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// TestClusterRefusesCrossSlotScripts: the test cluster refuses a script
// whose keys are in two slots, and one that touches a key it did not
// declare on another node. So every store test that passes on it shows
// that its scripts stay in one slot.
func TestClusterRefusesCrossSlotScripts(t *testing.T) {
	rdb := cluster.NewClusterClient(&redis.ClusterOptions{Addrs: redistest.SharedCluster(t).Addrs()})
	defer rdb.Close()
	err := rdb.Eval(t.Context(), "return 1", []string{"{a}:x", "{b}:x"}).Err()
	if err == nil || !strings.Contains(err.Error(), "CROSSSLOT") {
		t.Fatalf("a script on keys of two slots: %v, want CROSSSLOT", err)
	}
	// {b} and {c} hash to slots on different masters of a three-master cluster.
	err = rdb.Eval(t.Context(), "return redis.call('GET', '{c}:x')", []string{"{b}:x"}).Err()
	if err == nil {
		t.Fatal("a script touching an undeclared key of another node ran")
	}
}

// TestKeyedKeysExpireWithTheirWindows: the keys of a flood of new
// tenants are gone from Redis by themselves three windows after their
// last call (50 ms windows: polled for at most 5 s).
func TestKeyedKeysExpireWithTheirWindows(t *testing.T) {
	srv := redistest.Start(t)
	r := newReplica(t, srv, cluster.Config{KeyPrefix: "k6"})
	const window = 50 * time.Millisecond
	w, err := r.store.KeyedWindow("a.b", perKey(1, window, 0))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		if _, err := w.Wait(t.Context(), "flood-"+strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	last := time.Now()
	keys := func() int {
		n, err := r.rdb.Eval(t.Context(), `return #redis.call('KEYS', ARGV[1])`, nil, "{k6:a.b|*").Int()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := keys(); n == 0 {
		t.Fatal("no key for the 200 tenants")
	}
	for n := keys(); n > 0; n = keys() {
		if time.Since(last) > 5*time.Second {
			t.Fatalf("%d of 200 keys still in Redis 5 s after their last call (windows of %v)", n, window)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("200 keys gone %v after their last call (3 windows: %v)", time.Since(last).Round(time.Millisecond), 3*window)
}
