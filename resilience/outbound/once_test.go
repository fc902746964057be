package outbound

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sundial-go/sundial/pipeline/pipelinetest"
	"github.com/sundial-go/sundial/resilience"
)

// TestDoOnceMakesOneAttemptUnderTheBreaker: DoOnce never retries or
// hedges, even a retryable answer with a key under a hedging policy, yet
// its attempts are counted and judged by the breaker that Do shares: two
// failed DoOnce calls open it, and then Do and DoOnce are both refused.
func TestDoOnceMakesOneAttemptUnderTheBreaker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := DefaultPolicy()
		p.FailureThreshold, p.BreakDuration = 2, time.Minute
		p.HedgeDelay, p.SafeToHedge = time.Millisecond, true
		d := dep(t, p)
		n := 0
		slowFail := func(context.Context) error { n++; time.Sleep(time.Second); return unavailable() }
		for i := range 2 {
			if err := d.DoOnce(withKey(t.Context()), slowFail); pipelinetest.CodeOf(err) != "BILLING_UNAVAILABLE_001" {
				t.Fatalf("call %d: err %v, want the downstream's answer", i+1, err)
			}
		}
		if st := d.Stats(); n != 2 || st.Attempts != 2 || st.Retries != 0 || st.Hedges != 0 ||
			st.Breaker != resilience.BreakerOpen {
			t.Fatalf("%d attempts, Stats %+v; want 2 first attempts and the breaker open", n, st)
		}
		for name, do := range map[string]func(context.Context, func(context.Context) error) error{"Do": d.Do, "DoOnce": d.DoOnce} {
			if err := do(t.Context(), slowFail); pipelinetest.CodeOf(err) != CodeDependencyOpen || n != 2 {
				t.Fatalf("%s with the breaker open: err %v after %d attempts, want %s and no attempt", name, err, n, CodeDependencyOpen)
			}
		}
	})
}

func TestNilDependencyDoOnceRunsOnce(t *testing.T) {
	var d *Dependency
	n := 0
	err := d.DoOnce(t.Context(), func(context.Context) error { n++; return unavailable() })
	if n != 1 || err == nil {
		t.Fatalf("%d attempts, err %v; want one attempt and its answer", n, err)
	}
}
