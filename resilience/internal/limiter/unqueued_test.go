package limiter

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// takeN makes n calls at now and returns how many were admitted.
func takeN(u *unqueued, now time.Duration, n int) int {
	admitted := 0
	for range n {
		if ok, _, _ := u.take(now); ok {
			admitted++
		}
	}
	return admitted
}

// TestRaisedLimitCountsCallsDuringTheRaise: calls that take a permit while
// a reload raises the limit are counted in the window. The window of the
// raise admits at most the new limit in all. Calls land in the reload at
// its most exposed point: the new limit stored, the window's count not yet
// carried over.
func TestRaisedLimitCountsCallsDuringTheRaise(t *testing.T) {
	const at = 100 * time.Millisecond // all calls in window 0
	u := newUnqueued(10, time.Second)
	admitted := takeN(u, at, 40) // 10 admitted, 30 turned away
	during := 0
	u.onReload = func() { during = takeN(u, at, 5) }
	u.setLimit(100)
	u.onReload = nil
	admitted += during + takeN(u, at, 200)
	if admitted != 100 {
		t.Errorf("window of the raise admitted %d (%d during the reload); want 100, its new limit", admitted, during)
	}
	if q := u.quota(at); q.Limit != 100 || q.Remaining != 0 {
		t.Errorf("quota after = %+v; want limit 100, none left", q)
	}
}

// TestLoweredLimitKeepsThePermitsTaken: a lower limit keeps the permits
// already taken and admits nothing more once they reach it. Calls during
// the reload count against the old limit or the new one.
func TestLoweredLimitKeepsThePermitsTaken(t *testing.T) {
	const at = 100 * time.Millisecond
	u := newUnqueued(100, time.Second)
	before, during := takeN(u, at, 30), 0
	u.onReload = func() { during = takeN(u, at, 5) }
	u.setLimit(10)
	u.onReload = nil
	if after := takeN(u, at, 50); before != 30 || after != 0 {
		t.Errorf("admitted %d before the reload, %d after; want 30, 0", before, after)
	}
	if q := u.quota(at); q.Limit != 10 || q.Remaining != 0 {
		t.Errorf("quota after = %+v (%d admitted during the reload); want limit 10, none left", q, during)
	}
	if got := takeN(u, time.Second+at, 50); got != 10 {
		t.Errorf("next window admitted %d, want 10", got)
	}
}

// TestLoweredThenRaisedLimitKeepsThePermitsTaken: a count a lower limit
// put in starts past that limit. Raised again, the window admits only up
// to the new limit in all.
func TestLoweredThenRaisedLimitKeepsThePermitsTaken(t *testing.T) {
	const at = 100 * time.Millisecond
	u := newUnqueued(100, time.Second)
	admitted := takeN(u, at, 60)
	u.setLimit(10)
	admitted += takeN(u, at, 20) // turned away
	u.setLimit(100)
	if admitted += takeN(u, at, 200); admitted != 100 {
		t.Errorf("window admitted %d through 100 -> 10 -> 100, want 100", admitted)
	}
}

// TestReloadsUnderConcurrentCalls: however calls and reloads between
// limits 10 and 100 interleave, one window admits at most 100.
func TestReloadsUnderConcurrentCalls(t *testing.T) {
	const at = 100 * time.Millisecond
	for range 50 {
		u := newUnqueued(10, time.Second)
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() { admitted.Add(int64(takeN(u, at, 200))) })
		}
		wg.Go(func() {
			for i := range 40 {
				u.setLimit([]int{100, 10}[i%2])
			}
		})
		wg.Wait()
		if n := admitted.Load(); n > 100 {
			t.Fatalf("one window admitted %d with limits 10 and 100", n)
		}
	}
}

// TestHandedOverWindowAdmitsNothing: once a window without a queue hands
// its count to one with a queue (Reconfigure), a call that still reaches
// the old one is turned away, in its window and in later ones.
func TestHandedOverWindowAdmitsNothing(t *testing.T) {
	old := NewOperationWindow(10, time.Second, 0)
	origin := old.origin
	if ok, _, _ := old.TakeAt(origin.Add(100*time.Millisecond), false); !ok {
		t.Fatal("first call turned away")
	}
	cur, next, _ := old.Reconfigure(origin.Add(1500*time.Millisecond), 10, time.Second, 5)
	if cur == old || next != nil {
		t.Fatalf("Reconfigure kept the window without a queue")
	}
	for _, at := range []time.Duration{1200 * time.Millisecond, 1500 * time.Millisecond, 2500 * time.Millisecond} {
		if ok, _, _ := old.TakeAt(origin.Add(at), false); ok {
			t.Errorf("call at %v admitted by the window handed over", at)
		}
	}
}
