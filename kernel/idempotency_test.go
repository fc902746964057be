package kernel_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
	"github.com/sundial-go/sundial/resilience"
	"github.com/sundial-go/sundial/resilience/idempotency"
)

func TestIdempotencyConfigErrorsFailNew(t *testing.T) {
	const root = "Sundial.Kernel.Resilience"
	tests := []struct{ section, want string }{
		{`{"Idempotency":true}`, root + ".Idempotency: want an object"},
		{`{"Operations":{"orders.create":{"Idempotency":{"Required":"yes"}}}}`, root + ".Operations.orders.create.Idempotency.Required: want a boolean, got a string"},
		{`{"Operations":{"orders.create":{"Idempotency":{"RetentionSeconds":0}}}}`, root + ".Operations.orders.create.Idempotency.RetentionSeconds: must be greater than 0"},
		{`{"Operations":{"orders.create":{"Idempotency":{"MaxOutcomeBytes":2000000}}}}`, root + ".Operations.orders.create.Idempotency.MaxOutcomeBytes: 2000000 is too large"},
		{`{"Operations":{"orders.create":{"Idempotency":{"Retention":60}}}}`, root + ".Operations.orders.create.Idempotency.Retention: unknown key (known keys: Enabled, Required, RetentionSeconds, MaxOutcomeBytes)"},
	}
	for _, tt := range tests {
		var calls int
		if _, err := resKernel(t, wrap(tt.section), &calls); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("New(%s) = %v, want an error containing %q", tt.section, err, tt.want)
		}
	}
	var calls int
	k, err := resKernel(t, wrap(`{"Idempotency":{"Required":true,"RetentionSeconds":60},"Operations":{"orders.get":{"Idempotency":{"Enabled":false}}}}`), &calls)
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := k.Op("orders.create").Idempotency(); !p.Enabled || !p.Required || p.Retention != time.Minute {
		t.Errorf("orders.create: %+v", p)
	}
	if p, _ := k.Op("orders.get").Idempotency(); p.Enabled {
		t.Errorf("orders.get: %+v, want disabled", p)
	}
	if k.IdempotencyStore() == nil {
		t.Error("no store")
	}
}

type chargeReq struct {
	Card   string `json:"card"`
	Amount int    `json:"amount"`
}

type chargeRes struct {
	ChargeID string `json:"chargeId"`
}

// chargeKernel serves billing.charge with TimeoutSeconds 0.1 and
// idempotency keys; the handler takes *work (ignoring its context, as a
// charge that must not be cut half-way does) and counts executions.
func chargeKernel(t *testing.T, extra string, work *atomic.Int64, charges *atomic.Int64, opts ...kernel.Option) *kernel.Kernel {
	t.Helper()
	reg := operations.NewRegistry()
	err := operations.Register(reg, operations.Descriptor{ID: "billing.charge"}, func(ctx context.Context, in chargeReq) (chargeRes, error) {
		time.Sleep(time.Duration(work.Load()))
		n := charges.Add(1)
		return chargeRes{ChargeID: fmt.Sprintf("ch-%d", n)}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	conf := wrap(`{"Operations":{"billing.charge":{"TimeoutSeconds":0.1,"Idempotency":{"Required":true}` + extra + `}}}`)
	k, err := kernel.New(append([]kernel.Option{kernel.WithRegistry(reg), kernel.WithConfigJSON([]byte(conf))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func charge(k *kernel.Kernel, key string, amount int) kernel.Outcome {
	return k.Op("billing.charge").Handle(context.Background(), kernel.Unary{Caller: kernel.Caller{Protocol: pipeline.ProtocolGRPC, IdempotencyKey: key}, Input: &chargeReq{Card: "4242", Amount: amount}})
}

// TestIdempotencyAfterTimeout is the 504-then-retry story at the kernel:
// the deadline fires while the charge runs (504 at 100 ms), a retry with
// the key while it still runs gets 409 with a retry-after, and after the
// handler returned the retry gets its real result, marked as a replay;
// one charge.
func TestIdempotencyAfterTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var work, charges atomic.Int64
		work.Store(int64(300 * time.Millisecond))
		k := chargeKernel(t, "", &work, &charges)
		start := time.Now()
		o := charge(k, "key-1", 10)
		if pipelinetest.CodeOf(o.Err) != pipeline.CodeTimeout || time.Since(start) > 110*time.Millisecond {
			t.Fatalf("first call: %v after %v, want 504 at the deadline", o.Err, time.Since(start))
		}
		o = charge(k, "key-1", 10)
		if pe := pipeline.AsError(o.Err); pe.Code() != idempotency.CodeInProgress || pe.Kind() != pipeline.KindConflict {
			t.Fatalf("retry while running: %v, want 409 KERNEL_CONFLICT_001", o.Err)
		} else if s, ok := pipelinetest.RetryAfterSeconds(pe); !ok || s != 1 {
			t.Fatalf("retry-after %d %v", s, ok)
		}
		time.Sleep(300 * time.Millisecond)
		synctest.Wait()
		o = charge(k, "key-1", 10)
		if o.Err != nil || !o.Invocation.Reply().Replayed() || o.Output.(chargeRes).ChargeID != "ch-1" || charges.Load() != 1 {
			t.Fatalf("retry after: %v %v replayed=%v charges=%d", o.Output, o.Err, o.Invocation.Reply().Replayed(), charges.Load())
		}
		if o := charge(k, "key-1", 11); pipelinetest.KindOf(o.Err) != pipeline.KindUnprocessable {
			t.Fatalf("other amount: %v, want 422", o.Err)
		}
		if o := charge(k, "", 10); pipelinetest.CodeOf(o.Err) != "KERNEL_VALIDATION_004" {
			t.Fatalf("no key: %v, want 400", o.Err)
		}
		k.Wait(context.Background())
	})
}

// TestIdempotencyRejectedCallFreesTheKey: a call the concurrency limit
// rejects never ran and holds nothing; the same key then runs.
func TestIdempotencyRejectedCallFreesTheKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var work, charges atomic.Int64
		work.Store(int64(50 * time.Millisecond))
		k := chargeKernel(t, `,"ConcurrencyLimit":1`, &work, &charges)
		done := make(chan kernel.Outcome)
		go func() { done <- charge(k, "other", 10) }()
		time.Sleep(10 * time.Millisecond)
		if o := charge(k, "key-1", 10); pipelinetest.CodeOf(o.Err) != resilience.CodeConcurrencyLimited {
			t.Fatalf("while the slot is taken: %v, want 503 _003", o.Err)
		}
		<-done
		if o := charge(k, "key-1", 10); o.Err != nil || o.Invocation.Reply().Replayed() || charges.Load() != 2 {
			t.Fatalf("after: %v replayed=%v charges=%d, want a first execution", o.Err, o.Invocation.Reply().Replayed(), charges.Load())
		}
	})
}

// TestIdempotencyStoreConfig: Sundial.Kernel.IdempotencyStore bounds the
// in-process store — with MaxRecords 2, a third finished key evicts the
// oldest, whose retry then runs again, while the newest is still replayed
// — and bad values fail New naming their key path.
func TestIdempotencyStoreConfig(t *testing.T) {
	var work, charges atomic.Int64
	k := chargeKernel(t, "", &work, &charges,
		kernel.WithConfigJSON([]byte(`{"Sundial":{"Kernel":{"IdempotencyStore":{"MaxRecords":2,"MaxBytes":1048576}}}}`)))
	for _, key := range []string{"a", "b", "c"} {
		if o := charge(k, key, 10); o.Err != nil {
			t.Fatalf("key %s: %v", key, o.Err)
		}
	}
	if o := charge(k, "c", 10); o.Err != nil || !o.Invocation.Reply().Replayed() {
		t.Errorf("key c again: %v replayed=%v, want a replay", o.Err, o.Invocation.Reply().Replayed())
	}
	if o := charge(k, "a", 10); o.Err != nil || o.Invocation.Reply().Replayed() || charges.Load() != 4 {
		t.Errorf("key a again: %v replayed=%v charges=%d, want it evicted by the bound of 2 and run again (4 charges)",
			o.Err, o.Invocation.Reply().Replayed(), charges.Load())
	}

	const path = "Sundial.Kernel.IdempotencyStore"
	for _, tt := range []struct{ section, want string }{
		{`[]`, path + ": want an object"},
		{`{"MaxRecords":0}`, path + ".MaxRecords: want an integer from 1 to 100000000, got 0"},
		{`{"MaxRecords":1.5}`, path + ".MaxRecords: want an integer"},
		{`{"MaxRecords":"10"}`, path + ".MaxRecords: want an integer"},
		{`{"MaxBytes":1024}`, path + ".MaxBytes: want an integer from 1048576 (1 MiB)"},
		{`{"MaxEntries":10}`, path + ".MaxEntries: unknown key (known keys: MaxRecords, MaxBytes)"},
	} {
		reg := operations.NewRegistry()
		_, err := kernel.New(kernel.WithRegistry(reg),
			kernel.WithConfigJSON([]byte(`{"Sundial":{"Kernel":{"IdempotencyStore":`+tt.section+`}}}`)))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("IdempotencyStore %s: New = %v, want an error containing %q", tt.section, err, tt.want)
		}
	}
}

// TestIdempotencyNeedsConcreteOutput: an operation whose output type is an
// interface cannot take idempotency keys (a replay could not restore the
// dynamic type); New says so, naming the key path. Without the policy the
// operation is fine.
func TestIdempotencyNeedsConcreteOutput(t *testing.T) {
	for _, policy := range []string{`"Idempotency":{}`, `"TimeoutSeconds":1`} {
		reg := operations.NewRegistry()
		if err := operations.Register(reg, operations.Descriptor{ID: "billing.charge"}, func(ctx context.Context, in chargeReq) (any, error) {
			return chargeRes{ChargeID: "ch-1"}, nil
		}); err != nil {
			t.Fatal(err)
		}
		_, err := kernel.New(kernel.WithRegistry(reg), kernel.WithConfigJSON([]byte(wrap(`{"Operations":{"billing.charge":{`+policy+`}}}`))))
		const want = "Sundial.Kernel.Resilience.Operations.billing.charge.Idempotency: the operation's output type interface {} is an interface"
		switch {
		case policy == `"TimeoutSeconds":1` && err != nil:
			t.Errorf("without idempotency: New = %v, want no error", err)
		case policy != `"TimeoutSeconds":1` && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("with idempotency: New = %v, want an error containing %q", err, want)
		}
	}
}

// claimCounter counts the claims a store receives.
type claimCounter struct {
	idempotency.Store
	claims atomic.Int64
}

func (c *claimCounter) Claim(ctx context.Context, key, fp string, lease time.Duration) (string, *idempotency.Record, error) {
	c.claims.Add(1)
	return c.Store.Claim(ctx, key, fp, lease)
}

type validatedCharge struct {
	Amount int `json:"amount"`
}

func (v *validatedCharge) Validate() error {
	if v.Amount <= 0 {
		return pipeline.NewError(pipeline.KindValidation, "BILLING_VALIDATION_001", "amount must be greater than 0")
	}
	return nil
}

// TestIdempotencyClaimsOnlyCallsThatRun: a call turned away before its
// handler could start — invalid input, a deadline already passed on
// arrival, a concurrency rejection — never claims its key (the store sees
// no claim at all), so the key stays free for the call that runs.
func TestIdempotencyClaimsOnlyCallsThatRun(t *testing.T) {
	store := &claimCounter{Store: idempotency.NewMemoryStore(idempotency.MemoryConfig{})}
	reg := operations.NewRegistry()
	hold, held := make(chan struct{}), make(chan struct{})
	var runs atomic.Int64
	if err := operations.Register(reg, operations.Descriptor{ID: "billing.charge"}, func(ctx context.Context, in validatedCharge) (chargeRes, error) {
		runs.Add(1)
		if in.Amount == 99 {
			close(held)
			<-hold
		}
		return chargeRes{ChargeID: "ch"}, nil
	}); err != nil {
		t.Fatal(err)
	}
	k, err := kernel.New(kernel.WithRegistry(reg), kernel.WithIdempotencyStore(store),
		kernel.WithConfigJSON([]byte(wrap(`{"Operations":{"billing.charge":{"ConcurrencyLimit":1,"Idempotency":{}}}}`))))
	if err != nil {
		t.Fatal(err)
	}
	req := func(key string, amount int, deadline time.Time) kernel.Outcome {
		return k.Op("billing.charge").Handle(context.Background(), kernel.Unary{Caller: kernel.Caller{Protocol: pipeline.ProtocolHTTP, IdempotencyKey: key, Deadline: deadline}, Input: &validatedCharge{Amount: amount}})
	}
	if o := req("k-invalid", 0, time.Time{}); pipelinetest.KindOf(o.Err) != pipeline.KindValidation {
		t.Fatalf("invalid input: %v, want VALIDATION", o.Err)
	}
	if o := req("k-late", 5, time.Now().Add(-time.Second)); pipelinetest.KindOf(o.Err) != pipeline.KindTimeout {
		t.Fatalf("deadline passed on arrival: %v, want TIMEOUT", o.Err)
	}
	done := make(chan struct{})
	go func() { defer close(done); req("k-holder", 99, time.Time{}) }()
	<-held
	if o := req("k-rejected", 5, time.Time{}); pipelinetest.CodeOf(o.Err) != resilience.CodeConcurrencyLimited {
		t.Fatalf("while the slot is held: %v, want 503 _003", o.Err)
	}
	close(hold)
	<-done
	if c, r := store.claims.Load(), runs.Load(); c != 1 || r != 1 {
		t.Fatalf("claims %d, runs %d; want only the call that ran to claim (1, 1)", c, r)
	}
	for _, key := range []string{"k-invalid", "k-late", "k-rejected"} {
		if o := req(key, 5, time.Time{}); o.Err != nil || o.Invocation.Reply().Replayed() {
			t.Errorf("key %s afterwards: %v replayed=%v, want a first execution", key, o.Err, o.Invocation.Reply().Replayed())
		}
	}
}

// TestReplayedFailureIsNeutralToTheBreaker: replays of a key whose call
// failed (UNEXPECTED, a failure to the breaker the first time) run nothing
// and count for nothing: one client retrying its key cannot open the
// breaker for everyone (was: the third replay was already "breaker open",
// and so was another caller's valid call). A 422 for the key reused with
// another input is neutral too.
func TestReplayedFailureIsNeutralToTheBreaker(t *testing.T) {
	var runs atomic.Int64
	reg := operations.NewRegistry()
	if err := operations.Register(reg, operations.Descriptor{ID: "billing.charge"}, func(ctx context.Context, in chargeReq) (chargeRes, error) {
		runs.Add(1)
		if in.Amount < 0 {
			return chargeRes{}, errors.New("bug")
		}
		return chargeRes{ChargeID: "ok"}, nil
	}); err != nil {
		t.Fatal(err)
	}
	conf := wrap(`{"Operations":{"billing.charge":{"FailureThreshold":3,"BreakSeconds":60,"Idempotency":{}}}}`)
	k, err := kernel.New(kernel.WithRegistry(reg), kernel.WithConfigJSON([]byte(conf)))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	call := func(key string, amount int) kernel.Outcome {
		return k.Op("billing.charge").Handle(t.Context(), kernel.Unary{Caller: kernel.Caller{Protocol: pipeline.ProtocolHTTP, IdempotencyKey: key}, Input: &chargeReq{Card: "4242", Amount: amount}})
	}
	call("bad", -1) // one real failure
	for range 5 {
		if o := call("bad", -1); pipelinetest.KindOf(o.Err) != pipeline.KindUnexpected || !o.Invocation.Reply().Replayed() {
			t.Fatalf("retry of the failed key: %v (replayed %v), want its UNEXPECTED replayed", o.Err, o.Invocation.Reply().Replayed())
		}
		if o := call("bad", -2); pipelinetest.KindOf(o.Err) != pipeline.KindUnprocessable {
			t.Fatalf("the failed key with another input: %v, want UNPROCESSABLE", o.Err)
		}
	}
	if o := call("other", 10); o.Err != nil {
		t.Fatalf("another caller after one failure and ten answers from the key: %v, want success", o.Err)
	}
	if n := runs.Load(); n != 2 {
		t.Fatalf("handler ran %d times, want 2", n)
	}
}

// hungStore is an idempotency store that hangs: every Claim waits for its
// context (the middleware's store bound, 1 s).
type hungStore struct{ idempotency.Store }

func (hungStore) Claim(ctx context.Context, _, _ string, _ time.Duration) (string, *idempotency.Record, error) {
	<-ctx.Done()
	return "", nil, ctx.Err()
}
func (hungStore) Lease() time.Duration { return 30 * time.Second }

// TestHungIdempotencyStoreIsNeutralToTheBreaker: a store that hangs past
// the operation's TimeoutSeconds answers 503 KERNEL_UNAVAILABLE_006 after
// the deadline; nothing ran, so the breaker does not count it (was: judged
// by the ended context, a failure — two keyed calls opened the breaker for
// every caller).
func TestHungIdempotencyStoreIsNeutralToTheBreaker(t *testing.T) {
	reg := operations.NewRegistry()
	if err := operations.Register(reg, operations.Descriptor{ID: "billing.charge"}, func(ctx context.Context, in chargeReq) (chargeRes, error) {
		return chargeRes{ChargeID: "ok"}, nil
	}); err != nil {
		t.Fatal(err)
	}
	conf := wrap(`{"Operations":{"billing.charge":{"TimeoutSeconds":0.1,"FailureThreshold":2,"BreakSeconds":60,"Idempotency":{}}}}`)
	k, err := kernel.New(kernel.WithRegistry(reg), kernel.WithConfigJSON([]byte(conf)), kernel.WithIdempotencyStore(hungStore{}))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	for range 2 {
		o := k.Op("billing.charge").Invoke(t.Context(), kernel.Unary{Caller: kernel.Caller{Protocol: pipeline.ProtocolHTTP, IdempotencyKey: "k"}, Input: &chargeReq{Card: "4242", Amount: 1}})
		if !strings.Contains(pipeline.ErrorText(o.Err), idempotency.CodeStore) {
			t.Fatalf("keyed call on a hung store: %v, want %s in it", o.Err, idempotency.CodeStore)
		}
	}
	if o := k.Op("billing.charge").Invoke(t.Context(), kernel.Unary{Caller: kernel.Caller{Protocol: pipeline.ProtocolHTTP}, Input: &chargeReq{Card: "4242", Amount: 1}}); o.Err != nil {
		t.Fatalf("a call without a key after two on the hung store: %v, want success", o.Err)
	}
}
