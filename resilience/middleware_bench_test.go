package resilience_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience"
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

func benchOK(*pipeline.Invocation) error { return nil }

// rejecting returns limits for id that reject every call from now on, and
// a release to call when done (the concurrency case holds its only slot).
func rejecting(b testing.TB, kind string) (*resilience.OperationLimits, func()) {
	l := resilience.NewResilienceMiddleware(opID, benchRejects[kind])
	inv := pipeline.NewInvocation(context.Background(), op(opID), nil)
	release := func() {}
	switch kind {
	case "rate":
		_ = l.Invoke(inv, benchOK)
	case "breaker":
		_ = l.Invoke(inv, func(*pipeline.Invocation) error { return errors.New("down") })
	case "concurrency":
		held, done := make(chan struct{}), make(chan struct{})
		go func() {
			_ = l.Invoke(pipeline.NewInvocation(context.Background(), op(opID), nil), func(*pipeline.Invocation) error {
				close(held)
				<-done
				return nil
			})
		}()
		<-held
		release = func() {
			close(done)
			for l.InFlight() != 0 {
				time.Sleep(time.Millisecond)
			}
		}
	}
	if err := l.Invoke(inv, benchOK); pipeline.KindOf(err) != pipeline.KindUnavailable {
		b.Fatalf("%s: call = %v, want a rejection", kind, err)
	}
	return l, release
}

// BenchmarkResilience measures the built-in Resilience stage per call:
// the bare cost of context.WithTimeout (what any deadline costs), the
// DeadlineMiddleware alone, the whole stack (deadline, breaker, rate and
// concurrency limits) when nothing is rejected, the limits alone, and
// each kind of rejection.
func BenchmarkResilience(b *testing.B) {
	inv := pipeline.NewInvocation(context.Background(), op(opID), nil)
	b.Run("bare-WithTimeout", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			inv.SetContext(ctx)
			_ = benchOK(inv)
			cancel()
		}
	})
	// The DeadlineMiddleware stores the deadline on the invocation: clear
	// it before each reuse, as a fresh invocation would be.
	fresh := func(inv *pipeline.Invocation) *pipeline.Invocation {
		inv.SetDeadline(time.Time{})
		return inv
	}
	deadline := resilience.NewDeadlineMiddleware(time.Second, time.Minute)
	b.Run("deadline", func(b *testing.B) {
		b.ReportAllocs()
		inv.SetContext(context.Background())
		for b.Loop() {
			if err := deadline.Invoke(fresh(inv), benchOK); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("stack-admitted", func(b *testing.B) {
		b.ReportAllocs()
		h := pipeline.Chain(benchOK, deadline, resilience.NewResilienceMiddleware(opID, benchNeverRejects))
		inv.SetContext(context.Background())
		for b.Loop() {
			if err := h(fresh(inv)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("stack-admitted-parallel", func(b *testing.B) {
		b.ReportAllocs()
		h := pipeline.Chain(benchOK, deadline, resilience.NewResilienceMiddleware(opID, benchNeverRejects))
		b.RunParallel(func(pb *testing.PB) {
			inv := pipeline.NewInvocation(context.Background(), op(opID), nil)
			for pb.Next() {
				if err := h(fresh(inv)); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("limits-admitted", func(b *testing.B) {
		b.ReportAllocs()
		l := resilience.NewResilienceMiddleware(opID, benchNeverRejects)
		inv.SetContext(context.Background())
		for b.Loop() {
			_ = l.Invoke(inv, benchOK)
		}
	})
	for _, kind := range []string{"breaker", "rate", "concurrency"} {
		b.Run("limits-rejected-"+kind, func(b *testing.B) {
			b.ReportAllocs()
			l, release := rejecting(b, kind)
			defer release()
			inv.SetContext(context.Background())
			for b.Loop() {
				_ = l.Invoke(inv, benchOK)
			}
		})
	}
}

// TestLimitsAllocateNothing: neither an admitted call nor a rejection
// (once its retryAfter value has occurred) allocates.
func TestLimitsAllocateNothing(t *testing.T) {
	inv := pipeline.NewInvocation(context.Background(), op(opID), nil)
	admitted := resilience.NewResilienceMiddleware(opID, benchNeverRejects)
	if n := testing.AllocsPerRun(500, func() { _ = admitted.Invoke(inv, benchOK) }); n != 0 {
		t.Errorf("admitted call: %v allocations, want 0", n)
	}
	for _, kind := range []string{"breaker", "rate", "concurrency"} {
		l, release := rejecting(t, kind)
		if n := testing.AllocsPerRun(500, func() { _ = l.Invoke(inv, benchOK) }); n != 0 {
			t.Errorf("%s rejection: %v allocations, want 0", kind, n)
		}
		release()
	}
}
