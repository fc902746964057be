package resilience_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sundial-go/sundial/resilience"
)

func TestNewFixedWindowRejectsBadValues(t *testing.T) {
	t.Parallel()
	tests := []struct {
		permit int
		window time.Duration
		queue  int
	}{
		{0, time.Second, 0}, {-1, time.Second, 0}, {1, 0, 0}, {1, -time.Second, 0}, {1, time.Second, -1},
	}
	for _, tt := range tests {
		if l, err := resilience.NewFixedWindow(tt.permit, tt.window, tt.queue); err == nil || l != nil {
			t.Errorf("NewFixedWindow(%d, %v, %d) = %v, %v; want an error", tt.permit, tt.window, tt.queue, l, err)
		}
		if l, err := resilience.NewKeyedFixedWindow(tt.permit, tt.window, tt.queue); err == nil || l != nil {
			t.Errorf("NewKeyedFixedWindow(%d, %v, %d) = %v, %v; want an error", tt.permit, tt.window, tt.queue, l, err)
		}
	}
}

func TestFixedWindowAllowNeverQueues(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, err := resilience.NewFixedWindow(2, 10*time.Second, 5)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * time.Second)
		for i, want := range []bool{true, true, false, false} {
			if ok, retry := l.Allow(); ok != want || (!ok && retry != 7*time.Second) {
				t.Fatalf("Allow() #%d = %v, %v; want %v (retry 7s when false)", i, ok, retry, want)
			}
		}
		if resilience.WindowQueueDepth(l) != 0 {
			t.Errorf("QueueDepth() = %d, want 0", resilience.WindowQueueDepth(l))
		}
		time.Sleep(7 * time.Second)
		if ok, _ := l.Allow(); !ok {
			t.Errorf("Allow() in the next window = false, want true")
		}
	})
}

func TestFixedWindowWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, _ := resilience.NewFixedWindow(1, 10*time.Second, 1)
		if _, err := l.Wait(t.Context()); err != nil {
			t.Fatalf("Wait() = %v, want nil", err)
		}
		done, cancel := context.WithCancel(t.Context())
		cancel()
		if _, err := l.Wait(done); !errors.Is(err, context.Canceled) {
			t.Errorf("Wait(cancelled ctx) = %v, want context.Canceled", err)
		}
		start := time.Now()
		queued := make(chan error, 1)
		go func() { _, err := l.Wait(t.Context()); queued <- err }()
		synctest.Wait()
		if resilience.WindowQueueDepth(l) != 1 {
			t.Fatalf("QueueDepth() = %d, want 1", resilience.WindowQueueDepth(l))
		}
		if retry, err := l.Wait(t.Context()); !errors.Is(err, resilience.ErrLimited) || retry != 10*time.Second {
			t.Errorf("Wait() with the queue full = %v, %v; want 10s, ErrLimited", retry, err)
		}
		if err := <-queued; err != nil || time.Since(start) != 10*time.Second {
			t.Errorf("queued Wait() = %v after %v, want nil after 10s", err, time.Since(start))
		}
	})
}

func TestKeyedFixedWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, err := resilience.NewKeyedFixedWindow(2, time.Second, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, key := range []string{"acme", "globex", "acme", "globex"} {
			if _, err := l.Wait(t.Context(), key); err != nil {
				t.Fatalf("Wait(%q) = %v, want nil", key, err)
			}
		}
		if retry, err := l.Wait(t.Context(), "acme"); !errors.Is(err, resilience.ErrLimited) || retry != time.Second {
			t.Fatalf("third Wait(acme) = %v, %v; want 1s, ErrLimited", retry, err)
		}
		if _, err := l.Wait(t.Context(), "initech"); err != nil {
			t.Fatalf("Wait(initech) = %v: one key's limit must not affect another", err)
		}
		done, cancel := context.WithCancel(t.Context())
		cancel()
		if _, err := l.Wait(done, "acme"); !errors.Is(err, context.Canceled) {
			t.Errorf("Wait(cancelled ctx) = %v, want context.Canceled", err)
		}
	})
}

// TestKeyedFixedWindowForgetsIdleKeys checks that memory follows the keys
// active in the current window: callers choosing a new key per call must
// not grow the limiter without bound, and a key dropped while idle starts
// afresh without letting more than the limit through in any window.
func TestKeyedFixedWindowForgetsIdleKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, _ := resilience.NewKeyedFixedWindow(1, time.Second, 0)
		for i := range 1000 {
			if _, err := l.Wait(t.Context(), fmt.Sprint("tenant-", i)); err != nil {
				t.Fatalf("Wait(tenant-%d) = %v", i, err)
			}
			if i%100 == 99 {
				time.Sleep(time.Second)
			}
		}
		if n := l.Len(); n > 200 {
			t.Errorf("after 1000 one-off keys over 10 windows: Len() = %d, want at most 2 windows' worth (200)", n)
		}
		// A key still using its window is kept: its limit holds.
		if _, err := l.Wait(t.Context(), "busy"); err != nil {
			t.Fatal(err)
		}
		for i := range 300 {
			l.Wait(t.Context(), fmt.Sprint("churn-", i))
		}
		if _, err := l.Wait(t.Context(), "busy"); !errors.Is(err, resilience.ErrLimited) {
			t.Errorf("second Wait(busy) in one window after a sweep = %v, want ErrLimited", err)
		}
	})
}
