package idempotency_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
	"github.com/sundial-go/sundial/resilience/idempotency"
)

// leased is a memory store that claims to lease its claims, so the
// middleware renews them while the handler runs (as with Redis).
type leased struct {
	idempotency.Store
	lease  time.Duration
	renews atomic.Int64
}

func (s *leased) Lease() time.Duration { return s.lease }
func (s *leased) Renew(ctx context.Context, key, token string, lease time.Duration) error {
	s.renews.Add(1)
	return s.Store.Renew(ctx, key, token, lease)
}

// TestPanicAfterClaimSettles: a panic between the idempotency middleware
// and the handler (in another middleware) goes on unwinding, but the
// claim does not stay running: its renewal stops (goleak checks the
// goroutine is gone), and the key holds the UNEXPECTED outcome the kernel
// answers for a panic — a retry gets it replayed, not a 409 for ever.
func TestPanicAfterClaimSettles(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &leased{Store: idempotency.NewMemoryStore(idempotency.MemoryConfig{}), lease: 30 * time.Millisecond}
		mw := newMW(store, idempotency.Policy{})
		func() {
			defer func() {
				if r := recover(); r != "boom" {
					t.Errorf("recovered %v, want the middleware's panic to go on unwinding", r)
				}
			}()
			call(mw, "k", chargeIn{}, func(context.Context, *pipeline.Invocation) (any, error) {
				time.Sleep(50 * time.Millisecond) // long enough for renewals
				panic("boom")
			})
		}()
		renewed := store.renews.Load()
		time.Sleep(time.Second)
		synctest.Wait()
		if renewed == 0 || store.renews.Load() != renewed {
			t.Errorf("renewals: %d while running, %d a second after the panic; want some, then none", renewed, store.renews.Load())
		}
		var n atomic.Int64
		_, err, inv := call(mw, "k", chargeIn{}, counting(&n))
		if pipelinetest.CodeOf(err) != pipeline.CodeUnexpected || !inv.Reply().Replayed() || n.Load() != 0 {
			t.Errorf("retry after the panic: %v replayed=%v executions=%d, want the UNEXPECTED outcome replayed", err, inv.Reply().Replayed(), n.Load())
		}
	})
}

// TestTinyLeaseDoesNotCrash: a store whose lease is under 3 ns (a renewal
// interval of 0) does not make the renewal ticker panic.
func TestTinyLeaseDoesNotCrash(t *testing.T) {
	store := &leased{Store: idempotency.NewMemoryStore(idempotency.MemoryConfig{}), lease: 2}
	var n atomic.Int64
	h := func(ctx context.Context, inv *pipeline.Invocation) (any, error) {
		time.Sleep(5 * time.Millisecond)
		return counting(&n)(ctx, inv)
	}
	if _, err, _ := call(newMW(store, idempotency.Policy{}), "k", chargeIn{}, h); err != nil || n.Load() != 1 {
		t.Fatalf("%v, executions %d", err, n.Load())
	}
}

// TestMemoryStoreEvictsExpiredFirst: records expire by their own
// operation's retention, so an expired record can be younger than a live
// one; under the bound the expired one goes, whatever its age.
func TestMemoryStoreEvictsExpiredFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := idempotency.NewMemoryStore(idempotency.MemoryConfig{MaxEntries: 2})
		var n atomic.Int64
		long := newMW(store, idempotency.Policy{Retention: time.Hour})
		short := newMW(store, idempotency.Policy{Retention: time.Second})
		call(long, "old-but-live", chargeIn{}, counting(&n))
		call(short, "young-but-expired", chargeIn{}, counting(&n))
		time.Sleep(time.Minute)
		call(long, "new", chargeIn{}, counting(&n)) // the store is full: one record must go
		if _, _, inv := call(long, "old-but-live", chargeIn{}, counting(&n)); !inv.Reply().Replayed() || n.Load() != 3 {
			t.Fatalf("the live record: replayed=%v executions=%d, want it kept (the expired one evicted)", inv.Reply().Replayed(), n.Load())
		}
	})
}

// TestMemoryStoreFinishKeepsItsRecord: Finish makes room by evicting
// other finished records, never the one it finishes. An outcome that
// cannot fit even then is ErrTooLarge and the claim stays running; through
// the middleware it is stored as KERNEL_CONFLICT_002, so the key stays
// taken and a retry does not run the operation again.
func TestMemoryStoreFinishKeepsItsRecord(t *testing.T) {
	ctx := context.Background()
	store := idempotency.NewMemoryStore(idempotency.MemoryConfig{MaxBytes: 4096})
	tok, _, err := store.Claim(ctx, "k", "f", 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Finish(ctx, "k", tok, "f", make([]byte, 8000), time.Hour); !errors.Is(err, idempotency.ErrTooLarge) {
		t.Fatalf("Finish with an outcome over the byte bound: %v, want ErrTooLarge", err)
	}
	if _, rec, _ := store.Claim(ctx, "k", "f", 0); rec == nil || rec.Done {
		t.Fatalf("record after ErrTooLarge: %+v, want it still running", rec)
	}

	store = idempotency.NewMemoryStore(idempotency.MemoryConfig{MaxBytes: 4096})
	var n atomic.Int64
	mw := newMW(store, idempotency.Policy{MaxOutcomeBytes: 1 << 20})
	big := func(context.Context, *pipeline.Invocation) (any, error) {
		n.Add(1)
		return receipt{ID: strings.Repeat("x", 6000)}, nil
	}
	if out, err, _ := call(mw, "big", chargeIn{}, big); err != nil || out.(receipt).ID == "" {
		t.Fatalf("first call: %v %v, want its output", out, err)
	}
	if _, err, inv := call(mw, "big", chargeIn{}, big); pipelinetest.CodeOf(err) != "KERNEL_CONFLICT_002" || !inv.Reply().Replayed() || n.Load() != 1 {
		t.Fatalf("retry: %v replayed=%v executions=%d, want KERNEL_CONFLICT_002 replayed and one execution", err, inv.Reply().Replayed(), n.Load())
	}
	if entries, bytes := idempotency.StoreLen(store); entries != 1 || bytes > 4096 {
		t.Fatalf("store holds %d records, %d bytes; want 1 within 4096", entries, bytes)
	}
}

// TestRetryAfterOutcomeFreesTheKey: an outcome with a retry-after says
// "try later"; it is not stored (a replay would repeat the hint for the
// whole retention), so the retry runs.
func TestRetryAfterOutcomeFreesTheKey(t *testing.T) {
	var n atomic.Int64
	mw := newMW(idempotency.NewMemoryStore(idempotency.MemoryConfig{}), idempotency.Policy{})
	h := func(context.Context, *pipeline.Invocation) (any, error) {
		if n.Add(1) == 1 {
			return nil, pipeline.NewError(pipeline.KindConflict, "SHOP_CONFLICT_001", "The card is being updated.").WithRetryAfter(5 * time.Second)
		}
		return receipt{ID: "ch-1"}, nil
	}
	call(mw, "k", chargeIn{}, h)
	if out, err, inv := call(mw, "k", chargeIn{}, h); err != nil || inv.Reply().Replayed() || n.Load() != 2 || out.(receipt).ID != "ch-1" {
		t.Fatalf("retry: %v %v replayed=%v executions=%d, want a second execution", out, err, inv.Reply().Replayed(), n.Load())
	}
}

// TestRedisLateFinisherWithNoNewerClaim: a holder whose lease lapsed while
// nobody else claimed the key still stores its outcome (it is the key's
// one real outcome); the next call gets it replayed.
func TestRedisLateFinisherWithNoNewerClaim(t *testing.T) {
	onRedis(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		s := idempotency.NewRedisStore(rdb, "t", 50*time.Millisecond)
		tok, _, err := s.Claim(ctx, "late", "f", 0)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; rdb.Exists(ctx, "t:idem:late").Val() == 1; i++ {
			if i > 200 {
				t.Fatal("lease never expired")
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err := s.Finish(ctx, "late", tok, "f", []byte(`{"out":1}`), time.Hour); err != nil {
			t.Fatalf("late finisher, key free: %v, want its outcome stored", err)
		}
		if _, rec, _ := s.Claim(ctx, "late", "f", 0); rec == nil || !rec.Done || rec.Fingerprint != "f" || string(rec.Outcome) != `{"out":1}` {
			t.Fatalf("record %+v, want the late outcome with its fingerprint", rec)
		}
		if ttl := rdb.PTTL(ctx, "t:idem:late").Val(); ttl < 59*time.Minute {
			t.Fatalf("record expires in %v, want the retention", ttl)
		}
	})
}
