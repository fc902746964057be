package resilience_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
	"github.com/sundial-go/sundial/resilience"
	"github.com/sundial-go/sundial/resilience/deadline"
)

// Policies for the benchmarks: every limit configured, high enough never
// to reject; and each limit set to reject every call.
var (
	benchNeverRejects = resilience.Policy{
		FailureThreshold: 5, BreakDuration: time.Second,
		PermitLimit: 1 << 30, Window: time.Hour,
		ConcurrencyLimit: 1 << 20,
	}
	benchRejects = map[string]resilience.Policy{
		"rate":        {PermitLimit: 1, Window: time.Hour},
		"concurrency": {ConcurrencyLimit: 1},
		"breaker":     {FailureThreshold: 1, BreakDuration: time.Hour},
	}
)

func benchOK(context.Context, *pipeline.Invocation) (any, error) { return nil, nil }

// rejecting returns limits for id that reject every call from now on, and
// a release to call when done (the concurrency case holds its only slot).
func rejecting(b testing.TB, kind string) (*resilience.Limits, func()) {
	l := resilience.NewLimits(opID, benchRejects[kind])
	ctx := context.Background()
	inv := newInv(nil)
	release := func() {}
	switch kind {
	case "rate":
		_, _ = l.Invoke(ctx, inv, benchOK)
	case "breaker":
		_, _ = l.Invoke(ctx, inv, func(context.Context, *pipeline.Invocation) (any, error) { return nil, errors.New("down") })
	case "concurrency":
		held, done := make(chan struct{}), make(chan struct{})
		go func() {
			_, _ = l.Invoke(ctx, newInv(nil), func(context.Context, *pipeline.Invocation) (any, error) {
				close(held)
				<-done
				return nil, nil
			})
		}()
		<-held
		release = func() {
			close(done)
			for l.State().InFlight != 0 {
				time.Sleep(time.Millisecond)
			}
		}
	}
	if _, err := l.Invoke(ctx, inv, benchOK); pipelinetest.KindOf(err) != pipeline.KindUnavailable {
		b.Fatalf("%s: call = %v, want a rejection", kind, err)
	}
	return l, release
}

// BenchmarkResilience measures the built-in Resilience stage per call:
// the bare cost of context.WithTimeout (what any deadline costs), the
// deadline middleware alone, the whole stack (Limits: the deadline, then
// the breaker, rate and concurrency limits) when nothing is rejected, the
// stack behind a second deadline middleware (chain), the limits alone (an
// invocation without a deadline, so the deadline derives no context), and
// each kind of rejection.
func BenchmarkResilience(b *testing.B) {
	ctx := context.Background()
	inv := pipeline.NewInvocation(pipeline.Spec{Operation: op(opID), Deadline: time.Now().Add(time.Hour), DeadlineSource: pipeline.DeadlineOperation})
	b.Run("bare-WithTimeout", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_, _ = benchOK(ctx, inv)
			cancel()
		}
	})
	dmw := deadline.Middleware()
	b.Run("deadline", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := dmw.Invoke(ctx, inv, benchOK); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("stack-admitted", func(b *testing.B) {
		b.ReportAllocs()
		h := pipeline.Chain(benchOK, resilience.NewLimits(opID, benchNeverRejects))
		for b.Loop() {
			if _, err := h(ctx, inv); err != nil {
				b.Fatal(err)
			}
		}
	})
	// stack-admitted-static and -adaptive: the stack with its arrival read
	// on the invocation (as the kernel does), with the static concurrency
	// limit and with an adaptive one pinned high (its controller samples
	// every call); compare them run for run.
	for _, mode := range []string{"static", "adaptive"} {
		b.Run("stack-admitted-"+mode, func(b *testing.B) {
			b.ReportAllocs()
			p := benchNeverRejects
			if mode == "adaptive" {
				p.ConcurrencyLimit, p.Adaptive = resilience.AdaptiveLimit, resilience.Adaptive{MinLimit: 1 << 20, MaxLimit: 1 << 20}
			}
			h := pipeline.Chain(benchOK, resilience.NewLimits(opID, p))
			inv := pipeline.NewInvocation(pipeline.Spec{Operation: op(opID), Arrival: time.Now()})
			for b.Loop() {
				if _, err := h(ctx, inv); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("chain-admitted", func(b *testing.B) {
		b.ReportAllocs()
		h := pipeline.Chain(benchOK, dmw, resilience.NewLimits(opID, benchNeverRejects))
		for b.Loop() {
			if _, err := h(ctx, inv); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("stack-admitted-parallel", func(b *testing.B) {
		b.ReportAllocs()
		h := pipeline.Chain(benchOK, resilience.NewLimits(opID, benchNeverRejects))
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := h(ctx, inv); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("limits-admitted", func(b *testing.B) {
		b.ReportAllocs()
		l := resilience.NewLimits(opID, benchNeverRejects)
		inv := newInv(nil) // no deadline: the limits alone
		for b.Loop() {
			_, _ = l.Invoke(ctx, inv, benchOK)
		}
	})
	b.Run("limits-admitted-quota", func(b *testing.B) {
		// RateLimitHeaders on, a new invocation per call (its Reply
		// empty, as a call's is): the quota recorded on each.
		b.ReportAllocs()
		p := benchNeverRejects
		p.RateLimitHeaders = true
		l := resilience.NewLimits(opID, p)
		for b.Loop() {
			_, _ = l.Invoke(ctx, newInv(nil), benchOK)
		}
	})
	for _, kind := range []string{"breaker", "rate", "concurrency"} {
		b.Run("limits-rejected-"+kind, func(b *testing.B) {
			b.ReportAllocs()
			l, release := rejecting(b, kind)
			defer release()
			for b.Loop() {
				_, _ = l.Invoke(ctx, inv, benchOK)
			}
		})
	}
}

// TestLimitsAllocateNothing: neither an admitted call nor a rejection
// (once its retry-after value has occurred) allocates.
func TestLimitsAllocateNothing(t *testing.T) {
	ctx := context.Background()
	inv := newInv(nil)
	admitted := resilience.NewLimits(opID, benchNeverRejects)
	if n := testing.AllocsPerRun(500, func() { _, _ = admitted.Invoke(ctx, inv, benchOK) }); n != 0 {
		t.Errorf("admitted call: %v allocations, want 0", n)
	}
	for _, kind := range []string{"breaker", "rate", "concurrency"} {
		l, release := rejecting(t, kind)
		if n := testing.AllocsPerRun(500, func() { _, _ = l.Invoke(ctx, inv, benchOK) }); n != 0 {
			t.Errorf("%s rejection: %v allocations, want 0", kind, n)
		}
		release()
	}
}

// TestQuotaRenderedOnlyWhenSent: with RateLimitHeaders on, an admitted
// call records its quota typed — one allocation, the Reply's facts, beside
// the invocation's own — and the fields' strings are made only when an
// adapter asks for them (it was 11 allocations: the strings per call).
func TestQuotaRenderedOnlyWhenSent(t *testing.T) {
	ctx := context.Background()
	p := benchNeverRejects
	p.RateLimitHeaders = true
	l := resilience.NewLimits(opID, p)
	bare := testing.AllocsPerRun(200, func() { _ = newInv(nil) })
	var inv *pipeline.Invocation
	n := testing.AllocsPerRun(200, func() {
		inv = newInv(nil)
		_, _ = l.Invoke(ctx, inv, benchOK)
	})
	if n-bare != 1 {
		t.Errorf("admitted call with the quota: %v allocations beyond the invocation's, want 1", n-bare)
	}
	if v, ok := inv.Reply().Get("RateLimit-Policy"); !ok || v != `"default";q=1073741824;w=3600` {
		t.Errorf("RateLimit-Policy = %q, %v", v, ok)
	}
}

// BenchmarkUpdate measures a reload's cost per operation
// (Limits.Update, changing PermitLimit and
// ConcurrencyLimit in place), and the admitted call on limits that have
// been updated: the same path as before any update, one atomic pointer
// load per call.
func BenchmarkUpdate(b *testing.B) {
	b.Run("update", func(b *testing.B) {
		b.ReportAllocs()
		l := resilience.NewLimits(opID, benchNeverRejects)
		p := benchNeverRejects
		for i := 0; b.Loop(); i++ {
			p.PermitLimit = 1<<30 - i%2
			p.ConcurrencyLimit = 1<<20 - i%2
			l.Update(p)
		}
	})
	b.Run("limits-admitted-after-update", func(b *testing.B) {
		b.ReportAllocs()
		ctx := context.Background()
		inv := newInv(nil) // no deadline: the limits alone
		l := resilience.NewLimits(opID, benchNeverRejects)
		p := benchNeverRejects
		p.PermitLimit--
		l.Update(p)
		for b.Loop() {
			_, _ = l.Invoke(ctx, inv, benchOK)
		}
	})
}
