package lazytimer

import (
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// fake ends at end, and looks again every step until then.
type fake struct {
	end, step int64
	fired     atomic.Int64 // firings
	ended     atomic.Int64 // when Expire ended it; 0: not yet
}

func (f *fake) Expire(now int64) bool {
	f.fired.Add(1)
	if now >= f.end {
		f.ended.Store(now)
		return true
	}
	return false
}

func (f *fake) Next(now int64) int64 { return min(now+f.step, f.end) }

// TestTimerSleepsUntilItsInstant: the timer fires only at the instants
// its owner names, and Wake brings it forward only.
func TestTimerSleepsUntilItsInstant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fake{end: int64(time.Hour), step: int64(20 * time.Minute)}
		var tm Timer
		tm.Start(time.Now(), f, f.end)
		defer tm.Stop()
		tm.Wake(int64(2 * time.Hour)) // later: nothing changes
		if at := tm.Armed(); at != f.end {
			t.Fatalf("armed at %v, want %v", time.Duration(at), time.Hour)
		}
		tm.Wake(int64(time.Minute))
		time.Sleep(time.Minute)
		synctest.Wait()
		if n, at := f.fired.Load(), tm.Armed(); n != 1 || at != int64(21*time.Minute) {
			t.Fatalf("after a wake: %d firings, armed at %v; want 1, 21m", n, time.Duration(at))
		}
		time.Sleep(time.Hour)
		if n, at := f.fired.Load(), f.ended.Load(); n != 4 || at != f.end {
			t.Fatalf("%d firings, ended at %v; want 4, at 1h", n, time.Duration(at))
		}
	})
}

// TestStoppedTimerSleeps: a stopped timer fires no more, and Wake does
// not arm it again.
func TestStoppedTimerSleeps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fake{end: int64(time.Hour), step: int64(time.Minute)}
		var tm Timer
		tm.Start(time.Now(), f, Never)
		if at := tm.Armed(); at != Never {
			t.Fatalf("armed at %v with no instant", time.Duration(at))
		}
		tm.Stop()
		tm.Wake(int64(time.Second))
		time.Sleep(2 * time.Hour)
		if n := f.fired.Load(); n != 0 || !tm.Stopped() {
			t.Fatalf("%d firings after Stop (stopped %v)", n, tm.Stopped())
		}
	})
}
