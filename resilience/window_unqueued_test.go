package resilience_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sundial-go/sundial/resilience"
)

// TestFixedWindowWithoutQueueExact: calls on many goroutines at once get
// exactly the window's permits, no more (run it with -race).
func TestFixedWindowWithoutQueueExact(t *testing.T) {
	const limit, goroutines, calls = 1000, 8, 500
	l, err := resilience.NewFixedWindow(limit, time.Hour, 0)
	if err != nil {
		t.Fatal(err)
	}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range calls {
				if ok, _ := l.Allow(); ok {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if n := admitted.Load(); n != limit {
		t.Errorf("%d calls admitted %d times, want %d (the window's permits)", goroutines*calls, n, limit)
	}
}

// TestFixedWindowWithoutQueueWindows: each window has its own permits,
// also after idle windows; a rejection says how long until the next one.
func TestFixedWindowWithoutQueueWindows(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, err := resilience.NewFixedWindow(2, 10*time.Second, 0)
		if err != nil {
			t.Fatal(err)
		}
		allow := func(when string, want bool, wantRetry time.Duration) {
			t.Helper()
			if ok, retry := l.Allow(); ok != want || retry != wantRetry {
				t.Errorf("%s: Allow() = %v, %v; want %v, %v", when, ok, retry, want, wantRetry)
			}
		}
		allow("window 0, first", true, 0)
		time.Sleep(4 * time.Second)
		allow("window 0, second", true, 0)
		allow("window 0, third", false, 6*time.Second)
		time.Sleep(6 * time.Second)
		allow("window 1, first", true, 0)
		allow("window 1, second", true, 0)
		allow("window 1, third", false, 10*time.Second)
		time.Sleep(35 * time.Second) // windows 2 and 3 unused
		allow("window 4, first", true, 0)
		allow("window 4, second", true, 0)
		allow("window 4, third", false, 5*time.Second)
		if d := resilience.WindowQueueDepth(l); d != 0 {
			t.Errorf("QueueDepth() = %d, want 0", d)
		}
	})
}
