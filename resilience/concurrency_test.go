package resilience_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sundial-go/sundial/resilience"
)

func TestNewConcurrencyLimiterRejectsBadValues(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ limit, queue int }{{0, 0}, {-1, 0}, {1, -1}} {
		if l, err := resilience.NewConcurrencyLimiter(tt.limit, tt.queue); err == nil || l != nil {
			t.Errorf("NewConcurrencyLimiter(%d, %d) = %v, %v; want an error", tt.limit, tt.queue, l, err)
		}
	}
}

// TestConcurrencyLimiterZeroValueRefuses: a ConcurrencyLimiter not made by
// NewConcurrencyLimiter has no slot and no queue: it turns every call away
// and does not panic.
func TestConcurrencyLimiterZeroValueRefuses(t *testing.T) {
	var l resilience.ConcurrencyLimiter
	if l.TryAcquire() {
		t.Error("zero value: TryAcquire() = true, want false")
	}
	if err := l.Acquire(context.Background()); !errors.Is(err, resilience.ErrLimited) {
		t.Errorf("zero value: Acquire() = %v, want ErrLimited", err)
	}
}

func TestConcurrencyLimiterTryAcquire(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, _ := resilience.NewConcurrencyLimiter(1, 1)
		if !l.TryAcquire() {
			t.Fatal("TryAcquire() on a free limiter = false")
		}
		if l.TryAcquire() {
			t.Fatal("TryAcquire() with every slot taken = true")
		}
		waiter := make(chan error, 1)
		go func() { waiter <- l.Acquire(t.Context()) }()
		synctest.Wait()
		if err := l.Acquire(t.Context()); !errors.Is(err, resilience.ErrLimited) {
			t.Fatalf("Acquire() with slot and queue taken = %v, want ErrLimited", err)
		}
		l.Release() // handed to the waiter, not left for TryAcquire
		if l.TryAcquire() {
			t.Fatal("TryAcquire() took the slot released to a waiter")
		}
		if err := <-waiter; err != nil {
			t.Fatalf("waiter's Acquire() = %v, want nil", err)
		}
		l.Release()
		if resilience.InFlight(l) != 0 || resilience.SlotsQueueDepth(l) != 0 {
			t.Errorf("InFlight, QueueDepth = %d, %d; want 0, 0", resilience.InFlight(l), resilience.SlotsQueueDepth(l))
		}
	})
}

// TestConcurrencyLimiterCancelRacesHandOver cancels a waiter at the very
// moment its slot is handed over: either it returns holding the slot, or
// it returns ctx.Err() and the slot goes to the next waiter. The slot is
// never lost nor doubled.
func TestConcurrencyLimiterCancelRacesHandOver(t *testing.T) {
	for range 50 {
		synctest.Test(t, func(t *testing.T) {
			l, _ := resilience.NewConcurrencyLimiter(1, 2)
			l.TryAcquire()
			ctx, cancel := context.WithCancel(t.Context())
			first, second := make(chan error, 1), make(chan error, 1)
			go func() { first <- l.Acquire(ctx) }()
			synctest.Wait()
			go func() { second <- l.Acquire(t.Context()) }()
			synctest.Wait()
			cancel()
			l.Release()
			switch err := <-first; {
			case err == nil: // got the slot despite the cancel
				if resilience.InFlight(l) != 1 {
					t.Fatalf("InFlight() = %d, want 1", resilience.InFlight(l))
				}
				l.Release()
			case errors.Is(err, context.Canceled):
			default:
				t.Fatalf("first Acquire() = %v", err)
			}
			if err := <-second; err != nil {
				t.Fatalf("second Acquire() = %v, want the slot", err)
			}
			l.Release()
			if resilience.InFlight(l) != 0 || resilience.SlotsQueueDepth(l) != 0 {
				t.Fatalf("InFlight, QueueDepth = %d, %d; want 0, 0", resilience.InFlight(l), resilience.SlotsQueueDepth(l))
			}
		})
	}
}

func TestConcurrencyLimiterQueueTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, _ := resilience.NewConcurrencyLimiter(1, 1)
		l.TryAcquire()
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		start := time.Now()
		if err := l.Acquire(ctx); !errors.Is(err, context.DeadlineExceeded) || time.Since(start) != 2*time.Second {
			t.Fatalf("Acquire() = %v after %v, want DeadlineExceeded after 2s", err, time.Since(start))
		}
		if resilience.SlotsQueueDepth(l) != 0 {
			t.Fatalf("QueueDepth() = %d after the timeout, want 0", resilience.SlotsQueueDepth(l))
		}
		l.Release()
		if !l.TryAcquire() {
			t.Fatal("slot lost after a timed-out waiter")
		}
	})
}
