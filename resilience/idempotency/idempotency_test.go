package idempotency_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
	"github.com/sundial-go/sundial/resilience/cluster/redistest"
	"github.com/sundial-go/sundial/resilience/idempotency"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(redistest.StopSharedAfter(m))
}

type chargeIn struct {
	Card   string `json:"card"`
	Amount int    `json:"amount"`
}

type receipt struct {
	ID     string `json:"id"`
	Amount int    `json:"amount"`
}

func newMW(store idempotency.Store, pol idempotency.Policy) pipeline.Middleware {
	pol.Enabled = true
	return idempotency.New(idempotency.Config{
		Operation: "billing.charge", Policy: pol, Store: store,
		NewOutput: func() any { return new(receipt) }, Mark: &pipelinetest.Mark,
	})
}

func call(mw pipeline.Middleware, key string, in chargeIn, h pipeline.Handler) (any, error, *pipeline.Invocation) {
	inv := pipelinetest.NewInvocation(pipeline.Spec{Operation: pipelinetest.Operation("billing.charge"), IdempotencyKey: key, Input: &in})
	out, err := mw.Invoke(context.Background(), inv, h)
	return out, err, inv
}

// counting is a handler that charges: each execution gets a new ID.
func counting(n *atomic.Int64) pipeline.Handler {
	return func(_ context.Context, inv *pipeline.Invocation) (any, error) {
		i := n.Add(1)
		return receipt{ID: fmt.Sprintf("ch-%d", i), Amount: inv.Input().(*chargeIn).Amount}, nil
	}
}

func TestFirstRunsThenReplays(t *testing.T) {
	var n atomic.Int64
	mw := newMW(idempotency.NewMemoryStore(idempotency.MemoryConfig{}), idempotency.Policy{})
	out1, err, inv1 := call(mw, "k1", chargeIn{"4242", 10}, counting(&n))
	if err != nil || inv1.Reply().Replayed() {
		t.Fatalf("first: %v replayed=%v", err, inv1.Reply().Replayed())
	}
	out2, err, inv2 := call(mw, "k1", chargeIn{"4242", 10}, counting(&n))
	if err != nil || !inv2.Reply().Replayed() {
		t.Fatalf("second: %v replayed=%v", err, inv2.Reply().Replayed())
	}
	if out1.(receipt) != out2.(receipt) || n.Load() != 1 {
		t.Fatalf("out1 %v out2 %v executions %d; want the same receipt, one execution", out1, out2, n.Load())
	}
	// Another key runs again.
	if out3, _, _ := call(mw, "k2", chargeIn{"4242", 10}, counting(&n)); out3.(receipt).ID != "ch-2" {
		t.Fatalf("another key: %v", out3)
	}
}

func TestSameKeyDifferentInputIs422(t *testing.T) {
	var n atomic.Int64
	mw := newMW(idempotency.NewMemoryStore(idempotency.MemoryConfig{}), idempotency.Policy{})
	call(mw, "k1", chargeIn{"4242", 10}, counting(&n))
	_, err, _ := call(mw, "k1", chargeIn{"4242", 11}, counting(&n))
	if pipelinetest.KindOf(err) != pipeline.KindUnprocessable || pipelinetest.CodeOf(err) != idempotency.CodeMismatch || n.Load() != 1 {
		t.Fatalf("err %v executions %d; want 422 KERNEL_UNPROCESSABLE_001, one execution", err, n.Load())
	}
}

func TestRequiredKeyMissingIs400(t *testing.T) {
	var n atomic.Int64
	mw := newMW(idempotency.NewMemoryStore(idempotency.MemoryConfig{}), idempotency.Policy{Required: true})
	_, err, _ := call(mw, "", chargeIn{"4242", 10}, counting(&n))
	if pipelinetest.KindOf(err) != pipeline.KindValidation || pipelinetest.CodeOf(err) != "KERNEL_VALIDATION_004" || n.Load() != 0 {
		t.Fatalf("err %v executions %d; want 400 KERNEL_VALIDATION_004 and nothing run", err, n.Load())
	}
	// Not required: a call without a key simply runs.
	mw = newMW(idempotency.NewMemoryStore(idempotency.MemoryConfig{}), idempotency.Policy{})
	call(mw, "", chargeIn{"4242", 10}, counting(&n))
	call(mw, "", chargeIn{"4242", 10}, counting(&n))
	if n.Load() != 2 {
		t.Fatalf("executions %d without keys, want 2", n.Load())
	}
}

func TestMalformedKeyIs400(t *testing.T) {
	var n atomic.Int64
	mw := newMW(idempotency.NewMemoryStore(idempotency.MemoryConfig{}), idempotency.Policy{})
	for _, k := range []string{string(make([]byte, 256)), "tab\there", "é"} {
		if _, err, _ := call(mw, k, chargeIn{}, counting(&n)); pipelinetest.CodeOf(err) != "KERNEL_VALIDATION_005" {
			t.Errorf("key %q: %v, want KERNEL_VALIDATION_005", k, err)
		}
	}
}

// TestRunningKeyConflicts: while the first call runs, the same key gets
// 409 KERNEL_CONFLICT_001 with a retry-after, and afterwards the outcome.
func TestRunningKeyConflicts(t *testing.T) {
	var n atomic.Int64
	mw := newMW(idempotency.NewMemoryStore(idempotency.MemoryConfig{}), idempotency.Policy{})
	started, release := make(chan struct{}), make(chan struct{})
	done := make(chan any)
	go func() {
		out, _, _ := call(mw, "k", chargeIn{"4242", 10}, func(ctx context.Context, inv *pipeline.Invocation) (any, error) {
			close(started)
			<-release
			return counting(&n)(ctx, inv)
		})
		done <- out
	}()
	<-started
	_, err, _ := call(mw, "k", chargeIn{"4242", 10}, counting(&n))
	pe := pipeline.AsError(err)
	if pe.Kind() != pipeline.KindConflict || pe.Code() != idempotency.CodeInProgress {
		t.Fatalf("while running: %v, want 409 KERNEL_CONFLICT_001", err)
	}
	if ra, ok := pe.RetryAfter(); !ok || ra != idempotency.InProgressRetryAfter {
		t.Fatalf("retry-after %v %v", ra, ok)
	}
	close(release)
	first := <-done
	out, err, inv := call(mw, "k", chargeIn{"4242", 10}, counting(&n))
	if err != nil || !inv.Reply().Replayed() || out.(receipt) != first.(receipt) || n.Load() != 1 {
		t.Fatalf("after: %v %v replayed=%v executions=%d", out, err, inv.Reply().Replayed(), n.Load())
	}
}

// TestDeadlineNeverStored: a handler that runs past its deadline and then
// succeeds leaves its success (not a TIMEOUT) in the record; a handler
// that returns its context's error frees the key.
func TestDeadlineNeverStored(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n atomic.Int64
		mw := newMW(idempotency.NewMemoryStore(idempotency.MemoryConfig{}), idempotency.Policy{})
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		inv := pipelinetest.NewInvocation(pipeline.Spec{Operation: pipelinetest.Operation("billing.charge"), IdempotencyKey: "k", Input: &chargeIn{"4242", 10}})
		// Ignores its context: 300 ms.
		go mw.Invoke(ctx, inv, func(ctx context.Context, inv *pipeline.Invocation) (any, error) {
			time.Sleep(300 * time.Millisecond)
			return counting(&n)(ctx, inv)
		})
		time.Sleep(200 * time.Millisecond) // past the deadline, handler runs
		if _, err, _ := call(mw, "k", chargeIn{"4242", 10}, counting(&n)); pipelinetest.CodeOf(err) != idempotency.CodeInProgress {
			t.Fatalf("after the deadline, handler running: %v, want 409", err)
		}
		time.Sleep(200 * time.Millisecond)
		synctest.Wait()
		out, err, inv2 := call(mw, "k", chargeIn{"4242", 10}, counting(&n))
		if err != nil || !inv2.Reply().Replayed() || out.(receipt).ID != "ch-1" {
			t.Fatalf("after the handler returned: %v %v replayed=%v", out, err, inv2.Reply().Replayed())
		}

		// Honours its context: returns TIMEOUT, the key is freed.
		ctx2, cancel2 := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel2()
		inv3 := pipelinetest.NewInvocation(pipeline.Spec{Operation: pipelinetest.Operation("billing.charge"), IdempotencyKey: "k2", Input: &chargeIn{"4242", 10}})
		_, err = mw.Invoke(ctx2, inv3, func(ctx context.Context, _ *pipeline.Invocation) (any, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		})
		if pipelinetest.KindOf(err) != pipeline.KindTimeout {
			t.Fatalf("honouring handler: %v", err)
		}
		if _, err, inv := call(mw, "k2", chargeIn{"4242", 10}, counting(&n)); err != nil || inv.Reply().Replayed() || n.Load() != 2 {
			t.Fatalf("retry after a TIMEOUT: %v replayed=%v executions=%d, want a new execution", err, inv.Reply().Replayed(), n.Load())
		}
	})
}

func TestCodedFailureReplayed(t *testing.T) {
	var n atomic.Int64
	mw := newMW(idempotency.NewMemoryStore(idempotency.MemoryConfig{}), idempotency.Policy{})
	h := func(context.Context, *pipeline.Invocation) (any, error) {
		n.Add(1)
		return nil, pipeline.NewError(pipeline.KindNotFound, "SHOP_NOT_FOUND_001", "No card 9.").WithDetail("card", "9").
			WithDetail("big", int64(1)<<53+1).WithDetail("ratio", 0.5).WithDetail("ids", []int{7, 8})
	}
	_, err1, _ := call(mw, "k", chargeIn{"9", 1}, h)
	_, err2, inv := call(mw, "k", chargeIn{"9", 1}, h)
	e := pipeline.AsError(err2)
	if n.Load() != 1 || !inv.Reply().Replayed() || e.Code() != "SHOP_NOT_FOUND_001" || e.Message() != "No card 9." || e.Kind() != pipeline.KindNotFound {
		t.Fatalf("replay %v of %v, executions %d", err2, err1, n.Load())
	}
	// Details come back in their JSON form, integers exact (as int64).
	if v, _ := e.Details()["card"]; v != "9" {
		t.Fatalf("details %v", e.Details())
	}
	big, _ := e.Details()["big"]
	ratio, _ := e.Details()["ratio"]
	ids, _ := e.Details()["ids"]
	if big != int64(1)<<53+1 || ratio != 0.5 || fmt.Sprint(ids) != "[7 8]" {
		t.Fatalf("replayed details %#v %#v %#v, want int64 %d, 0.5, [7 8]", big, ratio, ids, int64(1)<<53+1)
	}
	// UNAVAILABLE frees the key: a retry runs.
	h2 := func(context.Context, *pipeline.Invocation) (any, error) {
		n.Add(1)
		return nil, pipeline.NewError(pipeline.KindUnavailable, "SHOP_UNAVAILABLE_001", "down")
	}
	call(mw, "u", chargeIn{"9", 1}, h2)
	call(mw, "u", chargeIn{"9", 1}, h2)
	if n.Load() != 3 {
		t.Fatalf("UNAVAILABLE twice: executions %d, want 3", n.Load())
	}
}

func TestOutcomeTooLarge(t *testing.T) {
	var n atomic.Int64
	mw := newMW(idempotency.NewMemoryStore(idempotency.MemoryConfig{}), idempotency.Policy{MaxOutcomeBytes: 100})
	h := func(context.Context, *pipeline.Invocation) (any, error) {
		n.Add(1)
		return receipt{ID: string(make([]byte, 200))}, nil
	}
	call(mw, "k", chargeIn{}, h)
	_, err, _ := call(mw, "k", chargeIn{}, h)
	if pipelinetest.CodeOf(err) != "KERNEL_CONFLICT_002" || n.Load() != 1 {
		t.Fatalf("%v executions %d, want KERNEL_CONFLICT_002 and one execution", err, n.Load())
	}
}

// TestFingerprintKeyOrder: the same input decoded from JSON in any key
// order has one fingerprint.
func TestFingerprintKeyOrder(t *testing.T) {
	var a, b chargeIn
	_ = json.Unmarshal([]byte(`{"card":"4242","amount":10}`), &a)
	_ = json.Unmarshal([]byte(`{"amount":10, "card":"4242"}`), &b)
	fa, _ := idempotency.Fingerprint(&a)
	fb, _ := idempotency.Fingerprint(b)
	if fa != fb {
		t.Fatalf("fingerprints differ: %s %s", fa, fb)
	}
	if fc, _ := idempotency.Fingerprint(chargeIn{"4242", 11}); fc == fa {
		t.Fatal("different input, same fingerprint")
	}
}

func TestScopedKeys(t *testing.T) {
	if idempotency.ScopedKey("a.b", "t1", "k") == idempotency.ScopedKey("a.b", "t2", "k") ||
		idempotency.ScopedKey("a.b", "", "t1k") == idempotency.ScopedKey("a.b", "t1", "k") ||
		idempotency.ScopedKey("a.b", "", "k") == idempotency.ScopedKey("a.c", "", "k") {
		t.Fatal("scopes meet")
	}
	var n atomic.Int64
	mw := idempotency.New(idempotency.Config{Operation: "billing.charge", Policy: idempotency.Policy{Enabled: true},
		Store: idempotency.NewMemoryStore(idempotency.MemoryConfig{}),
		Scope: func(_ context.Context, inv *pipeline.Invocation) string { v, _ := inv.Baggage("tenant"); return v }})
	for _, tenant := range []string{"acme", "globex", "acme"} {
		inv := pipelinetest.NewInvocation(pipeline.Spec{IdempotencyKey: "k", Input: &chargeIn{}, Baggage: map[string]string{"tenant": tenant}})
		mw.Invoke(context.Background(), inv, counting(&n))
	}
	if n.Load() != 2 {
		t.Fatalf("executions %d, want 2 (one per tenant)", n.Load())
	}
}

// TestConcurrentOneKey: 50 concurrent calls with one key, one execution.
func TestConcurrentOneKey(t *testing.T) {
	var n atomic.Int64
	mw := newMW(idempotency.NewMemoryStore(idempotency.MemoryConfig{}), idempotency.Policy{})
	var wg sync.WaitGroup
	var conflicts, replays, runs atomic.Int64
	gate := make(chan struct{})
	for range 50 {
		wg.Go(func() {
			<-gate
			_, err, inv := call(mw, "k", chargeIn{"4242", 10}, counting(&n))
			switch {
			case pipelinetest.CodeOf(err) == idempotency.CodeInProgress:
				conflicts.Add(1)
			case err == nil && inv.Reply().Replayed():
				replays.Add(1)
			case err == nil:
				runs.Add(1)
			}
		})
	}
	close(gate)
	wg.Wait()
	if n.Load() != 1 || runs.Load() != 1 || conflicts.Load()+replays.Load() != 49 {
		t.Fatalf("executions %d runs %d conflicts %d replays %d", n.Load(), runs.Load(), conflicts.Load(), replays.Load())
	}
}

// TestMemoryStoreExpires: a finished record is replayed until its
// retention ends, then the key runs again.
func TestMemoryStoreExpires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n atomic.Int64
		mw := newMW(idempotency.NewMemoryStore(idempotency.MemoryConfig{}), idempotency.Policy{Retention: time.Minute})
		call(mw, "k", chargeIn{}, counting(&n))
		time.Sleep(59 * time.Second)
		call(mw, "k", chargeIn{}, counting(&n))
		if n.Load() != 1 {
			t.Fatalf("within retention: executions %d", n.Load())
		}
		time.Sleep(time.Second)
		call(mw, "k", chargeIn{}, counting(&n))
		if n.Load() != 2 {
			t.Fatalf("after retention: executions %d, want 2", n.Load())
		}
	})
}

// TestMemoryStoreBoundUnderFlood: 50,000 distinct keys through a store
// bounded at 10,000 entries and 4 MiB: the store never holds more, and the
// heap after the flood is within the bound (measured before and after).
func TestMemoryStoreBoundUnderFlood(t *testing.T) {
	const maxEntries, maxBytes = 10_000, 4 << 20
	store := idempotency.NewMemoryStore(idempotency.MemoryConfig{MaxEntries: maxEntries, MaxBytes: maxBytes})
	mw := newMW(store, idempotency.Policy{})
	h := func(context.Context, *pipeline.Invocation) (any, error) { return receipt{ID: "x", Amount: 1}, nil }
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	var maxSeen int
	for i := range 50_000 {
		call(mw, fmt.Sprintf("key-%d", i), chargeIn{"4242", i}, h)
		if i%1000 == 0 {
			if e, b := idempotency.StoreLen(store); e > maxSeen {
				maxSeen = e
				if b > maxBytes {
					t.Fatalf("bytes %d > %d", b, maxBytes)
				}
			}
		}
	}
	entries, bytes := idempotency.StoreLen(store)
	after := heap()
	growth := int64(after) - int64(before)
	t.Logf("flood of 50000 keys: %d entries, %d bytes accounted; heap %d -> %d bytes (%+d)", entries, bytes, before, after, growth)
	if entries > maxEntries || maxSeen > maxEntries || bytes > maxBytes {
		t.Fatalf("entries %d (max seen %d) bytes %d over the bound", entries, maxSeen, bytes)
	}
	if growth > 3*maxBytes {
		t.Fatalf("heap grew by %d bytes, more than 3x the %d-byte bound", growth, maxBytes)
	}
	// The newest keys are still replayed.
	_, _, inv := call(mw, "key-49999", chargeIn{"4242", 49999}, h)
	if !inv.Reply().Replayed() {
		t.Fatal("newest key not replayed")
	}
}

func TestMemoryStoreFullOfRunningClaims(t *testing.T) {
	store := idempotency.NewMemoryStore(idempotency.MemoryConfig{MaxEntries: 2})
	ctx := context.Background()
	if _, _, err := store.Claim(ctx, "a", "f", 0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := store.Claim(ctx, "b", "f", 0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := store.Claim(ctx, "c", "f", 0); !errors.Is(err, idempotency.ErrFull) {
		t.Fatalf("third running claim: %v, want ErrFull", err)
	}
	mw := newMW(store, idempotency.Policy{})
	if _, err, _ := call(mw, "z", chargeIn{}, func(context.Context, *pipeline.Invocation) (any, error) { return nil, nil }); pipelinetest.CodeOf(err) != idempotency.CodeStore {
		t.Fatalf("%v, want 503 KERNEL_UNAVAILABLE_006", err)
	}
}

// onRedis runs f against a single redis-server and against the shared
// Redis Cluster (three masters with a replica each), as subtests.
func onRedis(t *testing.T, f func(t *testing.T, rdb redis.UniversalClient)) {
	t.Run("single", func(t *testing.T) {
		rdb := redis.NewClient(&redis.Options{Addr: redistest.Start(t).Addr()})
		t.Cleanup(func() { rdb.Close() })
		f(t, rdb)
	})
	t.Run("cluster", func(t *testing.T) {
		rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: redistest.SharedCluster(t).Addrs()})
		t.Cleanup(func() { rdb.Close() })
		if err := rdb.ForEachMaster(context.Background(), func(ctx context.Context, c *redis.Client) error {
			return c.FlushAll(ctx).Err()
		}); err != nil {
			t.Fatal(err)
		}
		f(t, rdb)
	})
}

// TestRedisStore: claim, conflict, finish and replay, on a real Redis,
// shared by two middleware as by two replicas.
func TestRedisStore(t *testing.T) {
	onRedis(t, func(t *testing.T, rdb redis.UniversalClient) {
		var n atomic.Int64
		a := newMW(idempotency.NewRedisStore(rdb, "t", 0), idempotency.Policy{})
		b := newMW(idempotency.NewRedisStore(rdb, "t", 0), idempotency.Policy{})
		out1, err, _ := call(a, "k", chargeIn{"4242", 10}, counting(&n))
		if err != nil {
			t.Fatal(err)
		}
		out2, err, inv := call(b, "k", chargeIn{"4242", 10}, counting(&n))
		if err != nil || !inv.Reply().Replayed() || out2.(receipt) != out1.(receipt) || n.Load() != 1 {
			t.Fatalf("replica b: %v %v replayed=%v executions=%d", out2, err, inv.Reply().Replayed(), n.Load())
		}
		if _, err, _ := call(b, "k", chargeIn{"4242", 11}, counting(&n)); pipelinetest.CodeOf(err) != idempotency.CodeMismatch {
			t.Fatalf("other input: %v", err)
		}
		ttl := rdb.PTTL(context.Background(), "t:idem:"+idempotency.ScopedKey("billing.charge", "", "k")).Val()
		if ttl <= 23*time.Hour || ttl > 24*time.Hour {
			t.Fatalf("retention TTL %v, want about 24h", ttl)
		}
	})
}

// TestRedisFencing: a holder whose lease expired and whose key another
// call claimed cannot overwrite or release the newer record.
func TestRedisFencing(t *testing.T) {
	onRedis(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		s := idempotency.NewRedisStore(rdb, "t", 0)
		// The lease is long, so the key is held whatever the scheduler
		// does; the test then makes it lapse on the server's clock.
		old, rec, err := s.Claim(ctx, "k", "f", time.Minute)
		if err != nil || rec != nil {
			t.Fatal(err, rec)
		}
		if _, rec, _ := s.Claim(ctx, "k", "f", time.Second); rec == nil || rec.Done {
			t.Fatalf("while held: %+v, want a running record", rec)
		}
		if ttl := rdb.PTTL(ctx, "t:idem:k").Val(); ttl <= 0 || ttl > time.Minute {
			t.Fatalf("held key's TTL %v, want the claim's 1 min lease", ttl)
		}
		// The lease lapses: cut its TTL to 1 ms, then wait until the
		// server has dropped the key (poll, bounded).
		if !rdb.PExpire(ctx, "t:idem:k", time.Millisecond).Val() {
			t.Fatal("PEXPIRE: the held key is gone")
		}
		for i := 0; rdb.Exists(ctx, "t:idem:k").Val() == 1; i++ {
			if i > 200 {
				t.Fatal("lease never expired")
			}
			time.Sleep(10 * time.Millisecond)
		}
		newer, rec, err := s.Claim(ctx, "k", "f", time.Minute)
		if err != nil || rec != nil {
			t.Fatal(err, rec)
		}
		if err := s.Finish(ctx, "k", old, "f", []byte(`{"out":1}`), time.Hour); !errors.Is(err, idempotency.ErrFenced) {
			t.Fatalf("late finisher: %v, want ErrFenced", err)
		}
		if err := s.Release(ctx, "k", old); !errors.Is(err, idempotency.ErrFenced) {
			t.Fatalf("late release: %v", err)
		}
		if err := s.Renew(ctx, "k", newer, time.Minute); err != nil {
			t.Fatal(err)
		}
		if err := s.Finish(ctx, "k", newer, "f", []byte(`{"out":2}`), time.Hour); err != nil {
			t.Fatal(err)
		}
		_, rec, _ = s.Claim(ctx, "k", "f", time.Second)
		if rec == nil || !rec.Done || string(rec.Outcome) != `{"out":2}` {
			t.Fatalf("record %+v, want the newer outcome", rec)
		}
	})
}

// lapsingStore is an in-process Store whose running claims lapse as a
// Redis key's do: a claim not renewed within its lease is lost, and the
// next claim of its key takes it. Its clock is time.Now: a synctest
// bubble's, in a bubble.
type lapsingStore struct {
	idempotency.Store // never loses a claim by itself
	lease             time.Duration
	mu                sync.Mutex
	held              map[string]lapsingClaim // running claims by key
	renewals          int
}

type lapsingClaim struct {
	token string
	until time.Time
}

func newLapsingStore(lease time.Duration) *lapsingStore {
	return &lapsingStore{Store: idempotency.NewMemoryStore(idempotency.MemoryConfig{}), lease: lease, held: map[string]lapsingClaim{}}
}

func (s *lapsingStore) Lease() time.Duration { return s.lease }

func (s *lapsingStore) Claim(ctx context.Context, key, fp string, lease time.Duration) (string, *idempotency.Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.held[key]; ok && !time.Now().Before(c.until) {
		_ = s.Store.Release(ctx, key, c.token) // the lease lapsed
		delete(s.held, key)
	}
	token, rec, err := s.Store.Claim(ctx, key, fp, lease)
	if token != "" {
		s.held[key] = lapsingClaim{token, time.Now().Add(lease)}
	}
	return token, rec, err
}

func (s *lapsingStore) Renew(ctx context.Context, key, token string, lease time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.held[key]; !ok || c.token != token || !time.Now().Before(c.until) {
		return idempotency.ErrFenced
	}
	s.held[key] = lapsingClaim{token, time.Now().Add(lease)}
	s.renewals++
	return s.Store.Renew(ctx, key, token, lease)
}

func (s *lapsingStore) Finish(ctx context.Context, key, token, fp string, outcome []byte, retention time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.held, key)
	return s.Store.Finish(ctx, key, token, fp, outcome, retention)
}

// running starts a call of key "k" through mw whose handler waits, and
// returns once the handler runs. finish lets the handler charge (counted
// in n) and waits for the call to end; it also runs when t ends.
func running(t *testing.T, mw pipeline.Middleware, n *atomic.Int64) (finish func()) {
	started, release := make(chan struct{}), make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		call(mw, "k", chargeIn{}, func(ctx context.Context, inv *pipeline.Invocation) (any, error) {
			close(started)
			<-release
			return counting(n)(ctx, inv)
		})
	}()
	<-started
	var once sync.Once
	finish = func() { once.Do(func() { close(release); <-done }) }
	t.Cleanup(finish)
	return finish
}

// TestLeaseRenewed: a handler running longer than the lease keeps its
// claim (the middleware renews it every third of the lease), so a retry
// gets 409, not a second run. In a synctest bubble, the renewals come at
// exact times.
func TestLeaseRenewed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n atomic.Int64
		store := newLapsingStore(300 * time.Millisecond)
		mw := newMW(store, idempotency.Policy{})
		finish := running(t, mw, &n)
		time.Sleep(950 * time.Millisecond) // > 3 leases: only renewal keeps it
		if _, err, _ := call(mw, "k", chargeIn{}, counting(&n)); pipelinetest.CodeOf(err) != idempotency.CodeInProgress {
			t.Fatalf("after 3 leases: %v, want 409", err)
		}
		if store.renewals != 9 {
			t.Errorf("renewals in 950 ms = %d, want 9 (one every 100 ms)", store.renewals)
		}
		finish()
		if _, err, inv := call(mw, "k", chargeIn{}, counting(&n)); err != nil || !inv.Reply().Replayed() || n.Load() != 1 {
			t.Fatalf("%v replayed=%v executions %d", err, inv.Reply().Replayed(), n.Load())
		}
	})
}

// longClaims is a Store whose claims take a lease of a minute, whatever
// the lease asked; Lease and Renew are its Store's.
type longClaims struct{ idempotency.Store }

func (s longClaims) Claim(ctx context.Context, key, fp string, _ time.Duration) (string, *idempotency.Record, error) {
	return s.Store.Claim(ctx, key, fp, time.Minute)
}

// TestRedisLeaseRenewed: on a real Redis, the middleware renews a running
// claim while its handler runs: the key's TTL comes down from the claim's
// minute to the store's 300 ms lease. Meanwhile a retry gets 409, and
// once the handler returns, the outcome is replayed. (TestLeaseRenewed
// times the renewals.)
func TestRedisLeaseRenewed(t *testing.T) {
	onRedis(t, func(t *testing.T, rdb redis.UniversalClient) {
		var n atomic.Int64
		mw := newMW(longClaims{idempotency.NewRedisStore(rdb, "t", 300*time.Millisecond)}, idempotency.Policy{})
		finish := running(t, mw, &n)
		if _, err, _ := call(mw, "k", chargeIn{}, counting(&n)); pipelinetest.CodeOf(err) != idempotency.CodeInProgress {
			t.Fatalf("while running: %v, want 409", err)
		}
		key := "t:idem:" + idempotency.ScopedKey("billing.charge", "", "k")
		for start := time.Now(); ; time.Sleep(10 * time.Millisecond) {
			// Renewed; or gone, which only a renewal makes it in time: on a
			// stalled machine a renewed 300 ms lease may lapse.
			if ttl := rdb.PTTL(context.Background(), key).Val(); ttl <= 300*time.Millisecond {
				break
			}
			if time.Since(start) > 30*time.Second {
				t.Fatal("the claim's TTL was not renewed to the 300 ms lease in 30 s")
			}
		}
		finish()
		if _, err, inv := call(mw, "k", chargeIn{}, counting(&n)); err != nil || !inv.Reply().Replayed() || n.Load() != 1 {
			t.Fatalf("%v replayed=%v executions %d", err, inv.Reply().Replayed(), n.Load())
		}
	})
}

// TestFingerprintIncludesFieldsHiddenFromJSON: a field JSON skips
// (json:"-", filled from the path or query) is part of the fingerprint;
// an input without such fields hashes as its JSON alone.
func TestFingerprintIncludesFieldsHiddenFromJSON(t *testing.T) {
	type payIn struct {
		Account string `param:"account" json:"-"`
		Amount  int    `json:"amount"`
		secret  int
	}
	a, _ := idempotency.Fingerprint(&payIn{Account: "A", Amount: 5})
	b, _ := idempotency.Fingerprint(payIn{Account: "B", Amount: 5})
	a2, _ := idempotency.Fingerprint(payIn{Account: "A", Amount: 5, secret: 1})
	if a == b {
		t.Fatal("accounts A and B, same amount: same fingerprint")
	}
	if a != a2 {
		t.Fatal("an unexported field changed the fingerprint")
	}
	// Promoted from an embedded struct (exported or not, by value or by
	// pointer, nil pointer included), or inside an embedded struct JSON
	// skips: still part of the request.
	type AccountRef struct {
		Account string `param:"account" json:"-"`
	}
	type accountRef struct {
		Account string `param:"account" json:"-"`
	}
	type Hidden struct{ Account string }
	type byValue struct {
		AccountRef
		Amount int `json:"amount"`
	}
	type byPointer struct {
		*AccountRef
		Amount int `json:"amount"`
	}
	type unexported struct {
		accountRef
		Amount int `json:"amount"`
	}
	type skipped struct {
		Hidden `json:"-"`
		Amount int `json:"amount"`
	}
	differ := func(name string, x, y any) {
		t.Helper()
		fx, errx := idempotency.Fingerprint(x)
		fy, erry := idempotency.Fingerprint(y)
		if errx != nil || erry != nil || fx == fy {
			t.Errorf("%s: accounts A and B, same amount: fingerprints %s, %s (%v, %v)", name, fx, fy, errx, erry)
		}
	}
	differ("embedded", byValue{AccountRef{"A"}, 5}, byValue{AccountRef{"B"}, 5})
	differ("embedded pointer", byPointer{&AccountRef{"A"}, 5}, byPointer{&AccountRef{"B"}, 5})
	differ("embedded nil pointer", byPointer{nil, 5}, byPointer{&AccountRef{"B"}, 5})
	differ("unexported embedded", unexported{accountRef{"A"}, 5}, unexported{accountRef{"B"}, 5})
	differ("embedded, skipped", skipped{Hidden{"A"}, 5}, skipped{Hidden{"B"}, 5})
	// A field JSON skips because it cannot encode it (a func) is no error:
	// nothing outside the process sets it.
	type Hooks struct{ OnDone func() }
	type hooked struct {
		Hooks  `json:"-"`
		Secret string `json:"-"`
		Amount int    `json:"amount"`
	}
	differ("beside a func", hooked{Hooks{func() {}}, "A", 5}, hooked{Hooks{}, "B", 5})
	h1, err1 := idempotency.Fingerprint(hooked{Hooks{func() {}}, "A", 5})
	h2, err2 := idempotency.Fingerprint(&hooked{Hooks{}, "A", 5})
	if err1 != nil || err2 != nil || h1 != h2 {
		t.Errorf("a func field changed the fingerprint or failed it: %s %s (%v, %v)", h1, h2, err1, err2)
	}
	plain, _ := idempotency.Fingerprint(chargeIn{"4242", 10})
	js, _ := json.Marshal(chargeIn{"4242", 10})
	if sum := sha256.Sum256(js); plain != hex.EncodeToString(sum[:]) {
		t.Fatal("an input without hidden fields no longer hashes as its JSON")
	}
}
