package cluster

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// TestGiveUpRetryIsBounded: a give-up that keeps failing is tried at
// doubling intervals, capped, and no more once the lease would have
// lapsed by itself. Closing the store stops it at once, and one that
// lands is not tried again.
func TestGiveUpRetryIsBounded(t *testing.T) {
	errLost := errors.New("lost")
	const wait, most = 50 * time.Millisecond, 300 * time.Millisecond
	t.Run("until the lease lapses", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			start := time.Now()
			var at []time.Duration
			retryUntil(make(chan struct{}), start.Add(time.Second), wait, most, func() error {
				at = append(at, time.Since(start))
				if len(at) > 100 { // past any bound: end the test
					return nil
				}
				return errLost
			})
			ms := time.Millisecond
			want := []time.Duration{0, 50 * ms, 150 * ms, 350 * ms, 650 * ms, 950 * ms}
			if len(at) != len(want) || time.Since(start) != 950*ms {
				t.Fatalf("tries at %v, returned after %v; want %v, 950ms", at, time.Since(start), want)
			}
			for i := range want {
				if at[i] != want[i] {
					t.Fatalf("tries at %v, want %v", at, want)
				}
			}
		})
	})
	t.Run("stopped at Close", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			start, stop := time.Now(), make(chan struct{})
			tries := 0
			go func() {
				time.Sleep(100 * time.Millisecond)
				close(stop)
			}()
			retryUntil(stop, start.Add(24*time.Hour), wait, most, func() error {
				tries++
				if tries > 100 { // past any bound: end the test
					return nil
				}
				return errLost
			})
			if d := time.Since(start); d != 100*time.Millisecond || tries != 2 {
				t.Fatalf("returned after %v and %d tries, want 100ms and 2", d, tries)
			}
		})
	})
	t.Run("landed", func(t *testing.T) {
		tries := 0
		retryUntil(nil, time.Now().Add(time.Hour), wait, most, func() error {
			tries++
			return nil
		})
		if tries != 1 {
			t.Fatalf("%d tries after the first landed, want 1", tries)
		}
	})
}
