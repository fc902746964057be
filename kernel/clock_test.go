package kernel

import (
	"testing"
	"testing/synctest"
	"time"
)

// TestArrivalClock: the arrival clock tells the time time.Now tells, with
// a monotonic reading when time.Now has one (not in a synctest bubble),
// within and past its refresh; a full reading is
// taken again only once the kept one is clockRefresh old.
func TestArrivalClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var c arrivalClock
		for _, step := range []time.Duration{0, time.Millisecond, 400 * time.Millisecond, 599 * time.Millisecond, time.Millisecond, 3 * time.Second} {
			time.Sleep(step)
			before := c.base.Load()
			got, want := c.now(), time.Now()
			if !got.Equal(want) || (got == got.Round(0)) != (want == want.Round(0)) {
				t.Fatalf("after %v: now() = %#v, want %#v", step, got, want)
			}
			refreshed := before == nil || c.base.Load() != before
			if wantRefresh := before == nil || time.Since(*before) >= clockRefresh; refreshed != wantRefresh {
				t.Errorf("after %v: refreshed = %v, want %v", step, refreshed, wantRefresh)
			}
		}
	})
	var c arrivalClock
	for range 3 {
		before := time.Now()
		got := c.now()
		after := time.Now()
		if got == got.Round(0) || got.Before(before) || got.After(after) {
			t.Errorf("now() = %v outside a bubble, want a monotonic reading between %v and %v", got, before, after)
		}
		time.Sleep(time.Millisecond) // the kept reading ages: later calls add to it
	}
}
