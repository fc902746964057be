package resilience_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience"
)

// TestShadowWindow: a shadow window of 3 per second rejects none of 10
// calls in one window and counts the 7 it would have rejected; its queue
// of 5 does not apply (no call waits). Without Shadow (and without a
// queue) the same calls are rejected.
func TestShadowWindow(t *testing.T) {
	for _, shadow := range []bool{true, false} {
		t.Run(map[bool]string{true: "shadow", false: "enforced"}[shadow], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var ran atomic.Int64
				p := resilience.Policy{PermitLimit: 3, Window: time.Second, Shadow: shadow}
				if shadow {
					p.QueueLimit = 5
				}
				h, l := limitStack(t, p, func(context.Context, *pipeline.Invocation) (any, error) { ran.Add(1); return nil, nil })
				start := time.Now()
				rejected := 0
				for range 10 {
					if err := callLimited(t.Context(), h); err != nil {
						if pipeline.AsError(err).Code() != resilience.CodeRateLimited {
							t.Fatalf("call: %v", err)
						}
						rejected++
					}
				}
				if waited := time.Since(start); waited != 0 {
					t.Fatalf("10 calls took %v, want no wait", waited)
				}
				time.Sleep(time.Second)
				for range 4 {
					if err := callLimited(t.Context(), h); err != nil {
						rejected++
					}
				}
				st := l.State()
				want := resilience.Rejections{Rate: 8}
				if shadow {
					if rejected != 0 || ran.Load() != 14 || st.Shadowed != want || st.Rejections != (resilience.Rejections{}) {
						t.Fatalf("shadow: %d rejected, %d ran, state %+v; want 0, 14, Shadowed %+v", rejected, ran.Load(), st, want)
					}
					return
				}
				if rejected != 8 || st.Rejections != want || st.Shadowed != (resilience.Rejections{}) {
					t.Fatalf("enforced: %d rejected, state %+v; want 8, Rejections %+v", rejected, st, want)
				}
			})
		})
	}
}

// TestShadowConcurrency: a shadow concurrency limit of 2 lets 5 calls run
// at once, counts the 3 it would have rejected (its queue of 3 does not
// apply), and keeps 2 slots held.
func TestShadowConcurrency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		var running atomic.Int64
		p := resilience.Policy{ConcurrencyLimit: 2, ConcurrencyQueueLimit: 3, Shadow: true}
		h, l := limitStack(t, p, func(context.Context, *pipeline.Invocation) (any, error) {
			running.Add(1)
			<-release
			return nil, nil
		})
		var outs []<-chan error
		for range 5 {
			outs = append(outs, goLimited(t.Context(), h))
		}
		synctest.Wait()
		st := l.State()
		if running.Load() != 5 || st.InFlight != 2 || st.ConcurrencyQueue != 0 || st.Shadowed != (resilience.Rejections{Concurrency: 3}) {
			t.Fatalf("%d running, state %+v; want 5 running, 2 in flight, Shadowed.Concurrency 3", running.Load(), st)
		}
		close(release)
		for _, out := range outs {
			if err := <-out; err != nil {
				t.Fatalf("call: %v", err)
			}
		}
		if st := l.State(); st.InFlight != 0 || st.Rejections != (resilience.Rejections{}) {
			t.Fatalf("after: %+v", st)
		}
	})
}

// TestShadowBreaker: a shadow breaker opens after 2 failures as usual, but
// the 5 calls during its break run (their own outcome) and are counted;
// after the break the probe's success closes it, and nothing more is
// counted.
func TestShadowBreaker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		down := errors.New("db: connection reset")
		var fail atomic.Bool
		fail.Store(true)
		var ran atomic.Int64
		p := resilience.Policy{FailureThreshold: 2, BreakDuration: 10 * time.Second, Shadow: true}
		h, l := limitStack(t, p, func(context.Context, *pipeline.Invocation) (any, error) {
			ran.Add(1)
			if fail.Load() {
				return nil, down
			}
			return nil, nil
		})
		for i := range 7 {
			if err := callLimited(t.Context(), h); !errors.Is(err, down) {
				t.Fatalf("call %d: %v, want the handler's own failure", i+1, err)
			}
		}
		if st := l.State(); ran.Load() != 7 || st.Breaker != resilience.BreakerOpen || st.Shadowed != (resilience.Rejections{Breaker: 5}) {
			t.Fatalf("%d ran, state %+v; want 7 ran, breaker open, Shadowed.Breaker 5", ran.Load(), st)
		}
		time.Sleep(10 * time.Second)
		fail.Store(false)
		for range 3 {
			if err := callLimited(t.Context(), h); err != nil {
				t.Fatal(err)
			}
		}
		if st := l.State(); st.Breaker != resilience.BreakerClosed || st.Shadowed != (resilience.Rejections{Breaker: 5}) || st.Rejections != (resilience.Rejections{}) {
			t.Fatalf("after the break: %+v; want closed, Shadowed.Breaker still 5", st)
		}
	})
}

// TestShadowPerKey: in shadow mode a per-key window with a queue makes no
// call wait either: the calls past its limit run at once and are counted.
func TestShadowPerKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := resilience.Policy{Shadow: true, PerKey: resilience.PerKey{PermitLimit: 1, Window: time.Second, QueueLimit: 5}}
		h, l := limitStack(t, p, okHandler)
		start := time.Now()
		for i := range 3 {
			if err := callLimited(t.Context(), h); err != nil {
				t.Fatalf("call %d: %v, want it run", i, err)
			}
		}
		if waited := time.Since(start); waited != 0 {
			t.Fatalf("3 calls took %v, want no wait", waited)
		}
		if st := l.State(); st.Shadowed != (resilience.Rejections{Rate: 2}) || st.Rejections != (resilience.Rejections{}) {
			t.Fatalf("state %+v; want Shadowed {Rate: 2}, no rejection", st)
		}
	})
}
