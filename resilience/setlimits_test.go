package resilience_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sundial-go/sundial/resilience"
)

// TestFixedWindowSetPermitLimit: a new limit applies in place — the
// permits taken in the current window stay counted (a lower limit admits
// nothing more in it), a higher one admits at once, with and without a
// queue; Quota reports it. Non-positive limits are refused.
func TestFixedWindowSetPermitLimit(t *testing.T) {
	for _, queue := range []int{0, 2} {
		synctest.Test(t, func(t *testing.T) {
			w, _ := resilience.NewFixedWindow(3, time.Second, queue)
			for range 2 {
				if ok, _ := w.Allow(); !ok {
					t.Fatal("Allow under the limit refused")
				}
			}
			if err := resilience.SetPermitLimit(w, 2); err != nil {
				t.Fatal(err)
			}
			if ok, _ := w.Allow(); ok {
				t.Fatalf("queue %d: admitted a third permit after the limit fell to 2", queue)
			}
			if q := resilience.WindowQuota(w); q.Limit != 2 || q.Remaining != 0 || q.Window != time.Second || q.Reset != time.Second {
				t.Fatalf("queue %d: Quota = %+v", queue, q)
			}
			if err := resilience.SetPermitLimit(w, 4); err != nil {
				t.Fatal(err)
			}
			if ok, _ := w.Allow(); !ok {
				t.Fatalf("queue %d: limit raised to 4 with 2 taken, Allow refused", queue)
			}
			if err := resilience.SetPermitLimit(w, 0); err == nil {
				t.Fatal("SetPermitLimit(0) accepted")
			}
		})
	}
}

// TestConcurrencySetLimits: SetLimits keeps the slots held, admits a
// waiter when the limit rises and turns the newest waiter away when the
// queue shrinks; bad values are refused.
func TestConcurrencySetLimits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, _ := resilience.NewConcurrencyLimiter(1, 2)
		if err := l.Acquire(t.Context()); err != nil {
			t.Fatal(err)
		}
		errs := make(chan error, 2)
		for range 2 {
			go func() { errs <- l.Acquire(context.Background()) }()
			synctest.Wait()
		}
		if err := resilience.SetLimits(l, 1, 1); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if err := <-errs; !errors.Is(err, resilience.ErrLimited) {
			t.Fatalf("newest waiter after the queue shrank: %v", err)
		}
		if err := resilience.SetLimits(l, 2, 1); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if err := <-errs; err != nil {
			t.Fatalf("waiter after the limit rose: %v", err)
		}
		if n := resilience.InFlight(l); n != 2 {
			t.Fatalf("InFlight = %d, want 2", n)
		}
		l.Release()
		l.Release()
		if resilience.SetLimits(l, 0, 0) == nil || resilience.SetLimits(l, 1, -1) == nil {
			t.Fatal("SetLimits accepted a non-positive limit or a negative queue")
		}
	})
}
