package resilience_test

import (
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sundial-go/sundial/resilience"
)

// TestKeyedFixedWindowMaxKeys floods a keyed limiter with one new key per
// call inside a single window: the number of limiters never exceeds the
// cap, keys beyond it are turned away without a limiter, the keys that
// have one keep their limits, and new keys get in again once the old
// windows are idle.
func TestKeyedFixedWindowMaxKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const maxKeys = 100
		l, err := resilience.NewKeyedFixedWindow(1, time.Minute, 0, resilience.WithMaxKeys(maxKeys))
		if err != nil {
			t.Fatal(err)
		}
		admitted, turnedAway := 0, 0
		for i := range 10 * maxKeys {
			retry, err := l.Wait(t.Context(), fmt.Sprint("flood-", i))
			switch {
			case err == nil:
				admitted++
			case errors.Is(err, resilience.ErrLimited):
				turnedAway++
				if retry <= 0 || retry > 100*time.Millisecond {
					t.Fatalf("Wait(flood-%d) turned away with retryAfter %v, want (0, 100ms]", i, retry)
				}
			default:
				t.Fatalf("Wait(flood-%d) = %v", i, err)
			}
			if n := l.Len(); n > maxKeys {
				t.Fatalf("after %d distinct keys: Len() = %d, want at most %d", i+1, n, maxKeys)
			}
		}
		if admitted != maxKeys || turnedAway != 9*maxKeys {
			t.Errorf("1000 distinct keys in one window: %d admitted, %d turned away; want %d and %d", admitted, turnedAway, maxKeys, 9*maxKeys)
		}
		// A key that has a limiter keeps its own limit.
		if retry, err := l.Wait(t.Context(), "flood-0"); !errors.Is(err, resilience.ErrLimited) || retry != time.Minute {
			t.Errorf("second Wait(flood-0) in its window = %v, %v; want 1m0s, ErrLimited", retry, err)
		}
		// Still full 100 ms later: the sweep finds nothing idle.
		time.Sleep(100 * time.Millisecond)
		if _, err := l.Wait(t.Context(), "late"); !errors.Is(err, resilience.ErrLimited) {
			t.Errorf("Wait(late) while every window is in use = %v, want ErrLimited", err)
		}
		// Once the windows are over, their limiters are idle and swept.
		time.Sleep(time.Minute)
		if _, err := l.Wait(t.Context(), "late"); err != nil {
			t.Errorf("Wait(late) after the windows ended = %v, want nil", err)
		}
		if n := l.Len(); n > maxKeys || n < 1 {
			t.Errorf("after the sweep: Len() = %d, want 1..%d", n, maxKeys)
		}
	})
}

// TestKeyedFixedWindowDefaultMaxKeys checks that the cap applies without
// WithMaxKeys.
func TestKeyedFixedWindowDefaultMaxKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, _ := resilience.NewKeyedFixedWindow(1, time.Hour, 0)
		for i := range resilience.DefaultMaxKeys + 500 {
			l.Wait(t.Context(), fmt.Sprint("k", i))
		}
		if n := l.Len(); n != resilience.DefaultMaxKeys {
			t.Errorf("after %d distinct keys in one window: Len() = %d, want DefaultMaxKeys (%d)", resilience.DefaultMaxKeys+500, n, resilience.DefaultMaxKeys)
		}
	})
}
