package kernel_test

import (
	"context"
	"strings"
	"testing"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
)

// TestEdgeChecksIdempotencyKeys: the edge checks the key's grammar
// against the operation's policy. A malformed key (bad syntax, or a
// transport's syntax failure) is KERNEL_VALIDATION_005 on an operation
// that takes keys, and nothing runs. On any other it is dropped: the call
// runs without a key. A valid key reaches the invocation.
func TestEdgeChecksIdempotencyKeys(t *testing.T) {
	var calls int
	k, err := resKernel(t, wrap(`{"Operations":{"orders.create":{"Idempotency":{"Enabled":true}}}}`), &calls)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	keyed, plain := k.Op("orders.create"), k.Op("orders.get")
	bad := []kernel.Caller{
		{IdempotencyKey: "caf\u00e9"},
		{IdempotencyKey: strings.Repeat("k", 256)}, // one byte over the grammar's 255
		{BadIdempotencyKey: true},
	}
	for _, c := range bad {
		calls = 0
		o := keyed.Invoke(context.Background(), kernel.Unary{Caller: c, Input: new("x")})
		if pipelinetest.CodeOf(o.Err) != "KERNEL_VALIDATION_005" || calls != 0 {
			t.Errorf("keyed op, %+v: %v, %d calls; want KERNEL_VALIDATION_005 and none", c, o.Err, calls)
		}
		o = plain.Invoke(context.Background(), kernel.Unary{Caller: c, Input: new("x")})
		if o.Err != nil || calls != 1 || o.Invocation.IdempotencyKey() != "" {
			t.Errorf("plain op, %+v: %v, %d calls, key %q; want it run without a key", c, o.Err, calls, o.Invocation.IdempotencyKey())
		}
	}
	// A rejection the adapter sends does not hide a malformed key.
	o := keyed.Reject(context.Background(), kernel.Caller{BadIdempotencyKey: true},
		pipeline.NewError(pipeline.KindValidation, "KERNEL_VALIDATION_002", "bad deadline"))
	if pipelinetest.CodeOf(o.Err) != "KERNEL_VALIDATION_005" {
		t.Errorf("Reject with a malformed key = %v, want KERNEL_VALIDATION_005", o.Err)
	}
	o = plain.Invoke(context.Background(), kernel.Unary{Caller: kernel.Caller{IdempotencyKey: "order-7"}, Input: new("x")})
	if o.Err != nil || o.Invocation.IdempotencyKey() != "order-7" {
		t.Errorf("valid key: %v, key %q; want order-7", o.Err, o.Invocation.IdempotencyKey())
	}
}

// TestOperationsAreStableHandles: Operations returns one handle per
// operation, sorted by ID, the same ones on every call and after a
// reload; a handle's Policy is the policy in force.
func TestOperationsAreStableHandles(t *testing.T) {
	var calls int
	k, err := resKernel(t, wrap(`{"Operations":{"orders.get":{"PermitLimit":5}}}`), &calls)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	ops := k.Operations()
	var ids []string
	for _, op := range ops {
		ids = append(ids, op.Descriptor().ID)
	}
	if strings.Join(ids, " ") != "orders.cancel orders.create orders.get" {
		t.Fatalf("Operations = %v, want the three, sorted by ID", ids)
	}
	if _, err := k.Reload(); err != nil {
		t.Fatal(err)
	}
	again := k.Operations()
	for i := range ops {
		if again[i] != ops[i] {
			t.Errorf("handle %d changed across Reload", i)
		}
	}
	if got := ops[2].Policy().PermitLimit; got != 5 {
		t.Errorf("orders.get Policy().PermitLimit = %d, want 5", got)
	}
}
