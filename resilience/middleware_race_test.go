package resilience_test

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
	"github.com/sundial-go/sundial/resilience"
)

// burst sends n concurrent calls at one operation and tallies the
// outcomes. work runs inside the handler; it may block.
type burst struct {
	admitted, running, maxRunning atomic.Int64
	byCode                        sync.Map // code -> *atomic.Int64
}

func (b *burst) handler(work func(context.Context, *pipeline.Invocation) error) pipeline.Handler {
	return func(ctx context.Context, inv *pipeline.Invocation) (any, error) {
		b.admitted.Add(1)
		n := b.running.Add(1)
		for {
			m := b.maxRunning.Load()
			if n <= m || b.maxRunning.CompareAndSwap(m, n) {
				break
			}
		}
		defer b.running.Add(-1)
		return nil, work(ctx, inv)
	}
}

func (b *burst) send(ctx context.Context, h pipeline.Handler, n int) {
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			code := pipelinetest.CodeOf(call(h, ctx, nil))
			c, _ := b.byCode.LoadOrStore(code, new(atomic.Int64))
			c.(*atomic.Int64).Add(1)
		})
	}
	wg.Wait()
}

func (b *burst) count(code string) int64 {
	if c, ok := b.byCode.Load(code); ok {
		return c.(*atomic.Int64).Load()
	}
	return 0
}

// rejected counts the limiters' and the breaker's rejections.
func (b *burst) rejected() int64 {
	return b.count(resilience.CodeRateLimited) + b.count(resilience.CodeConcurrencyLimited) + b.count(resilience.CodeCircuitOpen)
}

// TestThousandConcurrentCallsDeterministic sends 1,000 calls at once at
// an operation limited to 300 calls per hour, 50 at a time and 100
// waiting. Inside a synctest bubble every handler sleeps until all 1,000
// have arrived, so the split is exact: 300 pass the rate limit (700
// rejected), of which 50 run and 100 queue (150 rejected); the queued 100
// run once slots free up.
func TestThousandConcurrentCallsDeterministic(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const sent = 1000
		var b burst
		h, l := limitStack(t, resilience.Policy{PermitLimit: 300, Window: time.Hour, ConcurrencyLimit: 50, ConcurrencyQueueLimit: 100},
			b.handler(func(context.Context, *pipeline.Invocation) error { time.Sleep(10 * time.Millisecond); return nil }))
		b.send(t.Context(), h, sent)

		ok, rate, conc := b.count(""), b.count(resilience.CodeRateLimited), b.count(resilience.CodeConcurrencyLimited)
		if ok != 150 || rate != 700 || conc != 150 {
			t.Errorf("outcomes: ok %d, rate limited %d, concurrency limited %d; want 150, 700, 150", ok, rate, conc)
		}
		if got := b.admitted.Load(); got+b.rejected() != sent || got != ok {
			t.Errorf("admitted %d + rejected %d != sent %d (or admitted != successes %d)", got, b.rejected(), sent, ok)
		}
		if got := b.maxRunning.Load(); got != 50 {
			t.Errorf("at most %d ran at once, want exactly the limit 50", got)
		}
		if l.State().InFlight != 0 || l.State().ConcurrencyQueue != 0 || l.State().RateQueue != 0 {
			t.Errorf("at rest: in flight %d, queues %d, %d; want 0", l.State().InFlight, l.State().ConcurrencyQueue, l.State().RateQueue)
		}
	})
}

// TestBreakerOpensUnderABurst: the thousand calls of a burst all pass the
// closed breaker on arrival (synctest: each runs until it blocks); 600 pass
// the window, 8 run and 64 queue, the others are turned away by the slots.
// The breaker opens at the 20th failure, and the 64 already queued still
// run: exactly 72 admitted. Then a call is turned away by the breaker.
func TestBreakerOpensUnderABurst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const sent = 1000
		var b burst
		p := resilience.Policy{FailureThreshold: 20, BreakDuration: time.Hour, PermitLimit: 600, Window: time.Hour, ConcurrencyLimit: 8, ConcurrencyQueueLimit: 64}
		h, l := limitStack(t, p, b.handler(func(context.Context, *pipeline.Invocation) error {
			time.Sleep(10 * time.Millisecond)
			return pipeline.NewError(pipeline.KindUnavailable, "SHOP_UNAVAILABLE_001", "db down")
		}))
		b.send(t.Context(), h, sent)
		ran, rate, conc := b.admitted.Load(), b.count(resilience.CodeRateLimited), b.count(resilience.CodeConcurrencyLimited)
		if ran != 72 || rate != 400 || conc != 528 || l.State().Breaker != resilience.BreakerOpen {
			t.Errorf("admitted %d, rate limited %d, concurrency limited %d, breaker %v; want 72, 400, 528, open", ran, rate, conc, l.State().Breaker)
		}
		if err := callLimited(t.Context(), h); pipeline.AsError(err).Code() != resilience.CodeCircuitOpen {
			t.Errorf("a call after the burst: %v, want %s", err, resilience.CodeCircuitOpen)
		}
	})
}

// TestThousandConcurrentCalls is the same burst on the real scheduler and
// clock (meant for -race): whatever the interleaving, every call is either
// admitted or rejected, and no limit is ever exceeded.
func TestThousandConcurrentCalls(t *testing.T) {
	tests := []struct {
		name string
		p    resilience.Policy
		fail bool // the handler fails every call: the breaker opens
	}{
		{"rate and concurrency", resilience.Policy{PermitLimit: 600, Window: time.Hour, QueueLimit: 0, ConcurrencyLimit: 8, ConcurrencyQueueLimit: 64}, false},
		{"breaker, rate and concurrency", resilience.Policy{FailureThreshold: 20, BreakDuration: time.Hour, PermitLimit: 600, Window: time.Hour, ConcurrencyLimit: 8, ConcurrencyQueueLimit: 64}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			const sent = 1000
			var b burst
			h, l := limitStack(t, tt.p, b.handler(func(context.Context, *pipeline.Invocation) error {
				runtime.Gosched()
				if tt.fail {
					return pipeline.NewError(pipeline.KindUnavailable, "SHOP_UNAVAILABLE_001", "db down")
				}
				return nil
			}))
			b.send(t.Context(), h, sent)

			admitted := b.admitted.Load()
			if admitted+b.rejected() != sent {
				t.Errorf("admitted %d + rejected %d = %d, want sent %d", admitted, b.rejected(), admitted+b.rejected(), sent)
			}
			if admitted > int64(tt.p.PermitLimit) {
				t.Errorf("admitted %d, more than PermitLimit %d", admitted, tt.p.PermitLimit)
			}
			if got := b.maxRunning.Load(); got > int64(tt.p.ConcurrencyLimit) {
				t.Errorf("%d ran at once, more than ConcurrencyLimit %d", got, tt.p.ConcurrencyLimit)
			}
			if tt.fail {
				// Calls that passed the breaker before it opened may still
				// run, however many the scheduler had between the breaker
				// and the slots at that moment (the exact count is in
				// TestBreakerOpensUnderABurst); every call that comes
				// after it opened is turned away by it, none admitted.
				if l.State().Breaker != resilience.BreakerOpen {
					t.Errorf("after %d failures: breaker %v, want open", admitted, l.State().Breaker)
				}
				if admitted < int64(tt.p.FailureThreshold) {
					t.Errorf("admitted %d failing calls, fewer than the threshold %d that opened it", admitted, tt.p.FailureThreshold)
				}
				var after burst
				after.send(t.Context(), h, 100)
				if got := after.count(resilience.CodeCircuitOpen); got != 100 || after.admitted.Load() != 0 {
					t.Errorf("after it opened: %d of 100 turned away by the breaker, %d admitted; want 100, 0", got, after.admitted.Load())
				}
			}
			if l.State().InFlight != 0 || l.State().ConcurrencyQueue != 0 || l.State().RateQueue != 0 {
				t.Errorf("at rest: in flight %d, queues %d, %d; want 0", l.State().InFlight, l.State().ConcurrencyQueue, l.State().RateQueue)
			}
		})
	}
}
