package kernel_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
)

// TestPassedDeadlineNeverStartsTheHandler: a call that arrived 2 s ago to
// an operation with TimeoutSeconds 1 has an own deadline that passed
// before its handler could start. Every entry point (Invoke, Serve and
// Handle) answers KERNEL_TIMEOUT_001 and never starts the handler.
func TestPassedDeadlineNeverStartsTheHandler(t *testing.T) {
	reg := operations.NewRegistry()
	var ran atomic.Int32
	if err := operations.Register(reg, operations.Descriptor{ID: "test.tick"},
		func(context.Context, struct{}) (struct{}, error) { ran.Add(1); return struct{}{}, nil }); err != nil {
		t.Fatal(err)
	}
	k, err := kernel.New(kernel.WithRegistry(reg), kernel.WithConfigJSON([]byte(
		`{"Sundial":{"Kernel":{"Resilience":{"Operations":{"test.tick":{"TimeoutSeconds":1}}}}}}`)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := k.Wait(context.Background()); err != nil {
			t.Error(err)
		}
	})
	req := func() kernel.Unary {
		return kernel.Unary{Caller: kernel.Caller{Arrival: time.Now().Add(-2 * time.Second)}, Input: &struct{}{}}
	}
	op := k.Op("test.tick")
	entries := map[string]func() error{
		"Invoke": func() error { return op.Invoke(t.Context(), req()).Err },
		"Handle": func() error { return op.Handle(t.Context(), req()).Err },
		"Serve": func() error {
			var o kernel.Outcome
			op.Serve(t.Context(), req(), func(got kernel.Outcome) { o = got })
			return o.Err
		},
	}
	for name, call := range entries {
		if err := call(); pipelinetest.CodeOf(err) != pipeline.CodeTimeout {
			t.Errorf("%s = %v, want %s", name, err, pipeline.CodeTimeout)
		}
	}
	if n := ran.Load(); n != 0 {
		t.Fatalf("the handler started %d times after its deadline had passed", n)
	}
}
