package kernel

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
)

// TestWorkers: with WithWorkers, sequential calls reuse one worker; a
// straggler keeps its worker while another serves the next call, and is
// still answered at its deadline; idle workers exit after the idle time,
// and Wait dismisses them at once.
func TestWorkers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		reg := operations.NewRegistry()
		if err := operations.Register(reg, operations.Descriptor{ID: "test.work"}, func(_ context.Context, in string) (string, error) {
			if in == "stall" {
				<-release
			}
			return in, nil
		}); err != nil {
			t.Fatal(err)
		}
		k, err := New(WithRegistry(reg), WithWorkers(time.Second),
			WithConfigJSON([]byte(`{"Sundial":{"Kernel":{"Resilience":{"TimeoutSeconds":1}}}}`)))
		if err != nil {
			t.Fatal(err)
		}
		call := func(in string) Outcome {
			return k.Op("test.work").Handle(t.Context(), Unary{Caller: Caller{Protocol: pipeline.ProtocolGRPC}, Input: &in})
		}
		for i := range 3 {
			if o := call("ok"); o.Err != nil || o.Output != "ok" {
				t.Fatalf("call %d = %v, %v", i, o.Output, o.Err)
			}
			synctest.Wait()
		}
		if n := k.workers.Load(); n != 1 {
			t.Errorf("%d workers after 3 sequential calls, want 1", n)
		}
		start := time.Now()
		if o := call("stall"); pipelinetest.CodeOf(o.Err) != pipeline.CodeTimeout || time.Since(start) != time.Second+settleWindow {
			t.Errorf("stalled call = %v after %v, want TIMEOUT at the deadline", o.Err, time.Since(start))
		}
		if o := call("ok"); o.Err != nil {
			t.Errorf("call while a worker straggles = %v", o.Err)
		}
		synctest.Wait()
		if n := k.workers.Load(); n != 2 {
			t.Errorf("%d workers with one straggling, want 2", n)
		}
		time.Sleep(2 * time.Second) // the idle one exits
		synctest.Wait()
		if n := k.workers.Load(); n != 1 {
			t.Errorf("%d workers after the idle time, want 1 (the straggler's)", n)
		}
		close(release)
		if err := k.Wait(t.Context()); err != nil {
			t.Fatal(err)
		}
		if n := k.workers.Load(); n != 0 {
			t.Errorf("%d workers after Wait, want 0", n)
		}
	})
}
