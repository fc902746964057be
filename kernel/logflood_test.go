package kernel_test

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/kernel/logs/logstest"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
)

// TestLateResultsAreSampled: a flood of calls to a handler that ignores
// its context logs a handful of late results one by one; one summary
// counts the others.
func TestLateResultsAreSampled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 50
		release := make(chan struct{})
		k, sink := stragglerKernel(t,
			`{"Sundial":{"Kernel":{"Resilience":{"Operations":{"test.slow":{"TimeoutSeconds":0.5}}}}}}`, release)
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				in := "ignore"
				o := k.Op("test.slow").Handle(t.Context(), kernel.Unary{Input: &in})
				if pipelinetest.CodeOf(o.Err) != pipeline.CodeTimeout {
					t.Errorf("Handle = %v, want %s", o.Err, pipeline.CodeTimeout)
				}
			})
		}
		wg.Wait()
		time.Sleep(time.Second)
		close(release)
		if err := k.Wait(t.Context()); err != nil {
			t.Fatalf("Wait = %v", err)
		}
		if recs := sink.Find(pipelinetest.Message("kernel: late result discarded")); len(recs) != logstest.SampleBurst {
			t.Fatalf("%d of %d late results logged one by one, want %d", len(recs), n, logstest.SampleBurst)
		}
		time.Sleep(logstest.SampleSummaryAfter)
		synctest.Wait()
		recs := sink.Find(pipelinetest.Message("kernel: late result discarded"))
		last := recs[len(recs)-1]
		if len(recs) != logstest.SampleBurst+1 || last.Attrs["suppressed"] != int64(n-logstest.SampleBurst) {
			t.Fatalf("last of %d records %+v, want a summary of %d", len(recs), last, n-logstest.SampleBurst)
		}
	})
}
