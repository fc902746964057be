package breaker

import (
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

func mustAllow(t *testing.T, b *Breaker) Ticket {
	t.Helper()
	tk, ok, retry := b.Allow()
	if !ok {
		t.Fatalf("Allow() = rejected (retry %v), want admitted; state %v", retry, b.State())
	}
	return tk
}

func mustReject(t *testing.T, b *Breaker, wantRetry time.Duration) {
	t.Helper()
	if _, ok, retry := b.Allow(); ok || retry != wantRetry {
		t.Fatalf("Allow() = %v, retry %v; want rejected, retry %v", ok, retry, wantRetry)
	}
}

func fail(t *testing.T, b *Breaker, n int) {
	t.Helper()
	for range n {
		b.Done(mustAllow(t, b), Failure)
	}
}

func TestOpensAfterConsecutiveFailures(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := New(3, 30*time.Second)
		fail(t, b, 2)
		b.Done(mustAllow(t, b), Success) // resets the count
		fail(t, b, 2)
		if got := b.State(); got != Closed {
			t.Fatalf("after 2+2 failures split by a success: State() = %v, want closed", got)
		}
		if got := b.Failures(); got != 2 {
			t.Fatalf("Failures() = %d, want 2", got)
		}
		b.Done(mustAllow(t, b), Neutral) // neither resets nor counts
		fail(t, b, 1)
		if got := b.State(); got != Open {
			t.Fatalf("after 3 consecutive failures: State() = %v, want open", got)
		}
		mustReject(t, b, 30*time.Second)
		time.Sleep(12*time.Second + 300*time.Millisecond)
		mustReject(t, b, 17*time.Second+700*time.Millisecond)
	})
}

func TestHalfOpenSingleProbe(t *testing.T) {
	tests := []struct {
		name      string
		result    Result
		wantState State
		// wantNext: after the probe ends, is the next call admitted?
		wantNext bool
	}{
		{"probe success closes", Success, Closed, true},
		{"probe failure re-opens", Failure, Open, false},
		{"cancelled probe frees the slot", Neutral, HalfOpen, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := New(1, 10*time.Second)
				fail(t, b, 1)
				time.Sleep(10 * time.Second)
				if got := b.State(); got != HalfOpen {
					t.Fatalf("after the break: State() = %v, want half-open", got)
				}
				probe := mustAllow(t, b)
				if !probe.Probe() {
					t.Fatalf("first call after the break: Probe() = false, want true")
				}
				mustReject(t, b, 0) // the probe is running
				mustReject(t, b, 0)
				b.Done(probe, tt.result)
				if got := b.State(); got != tt.wantState {
					t.Fatalf("after the probe: State() = %v, want %v", got, tt.wantState)
				}
				_, ok, retry := b.Allow()
				if ok != tt.wantNext {
					t.Fatalf("next Allow() = %v (retry %v), want %v", ok, retry, tt.wantNext)
				}
				if !ok && retry != 10*time.Second {
					t.Fatalf("re-opened: retry %v, want a full break of 10s", retry)
				}
			})
		})
	}
}

func TestCallsFromAnEarlierStateChangeNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := New(2, 10*time.Second)
		slowOK := mustAllow(t, b)   // admitted while closed, still running
		slowFail := mustAllow(t, b) // likewise
		fail(t, b, 2)               // opens
		b.Done(slowOK, Success)     // must not close it
		b.Done(slowFail, Failure)   // must not extend the break
		if got := b.State(); got != Open {
			t.Fatalf("after stale tickets: State() = %v, want open", got)
		}
		time.Sleep(10 * time.Second)
		probe := mustAllow(t, b)
		b.Done(slowOK, Success) // a stale success during half-open does not close it
		if got := b.State(); got != HalfOpen {
			t.Fatalf("stale success during half-open: State() = %v, want half-open", got)
		}
		b.Done(probe, Success)
		closedTicket := mustAllow(t, b)
		b.Done(slowFail, Failure) // from two generations ago: not counted
		if got := b.Failures(); got != 0 {
			t.Fatalf("stale failure after closing: Failures() = %d, want 0", got)
		}
		b.Done(closedTicket, Failure)
		if got := b.Failures(); got != 1 {
			t.Fatalf("Failures() = %d, want 1", got)
		}
	})
}

func TestConcurrentProbesAreExclusive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := New(1, time.Second)
		fail(t, b, 1)
		time.Sleep(time.Second)
		var probes atomic.Int32
		var wg sync.WaitGroup
		for range 64 {
			wg.Go(func() {
				if tk, ok, _ := b.Allow(); ok {
					if !tk.Probe() {
						t.Errorf("admitted a non-probe call while half-open")
					}
					probes.Add(1)
				}
			})
		}
		wg.Wait()
		if got := probes.Load(); got != 1 {
			t.Fatalf("admitted %d probes, want exactly 1", got)
		}
	})
}

func TestThresholdClamped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, th := range []int{0, -5} {
			b := New(th, time.Second)
			fail(t, b, 1)
			if got := b.State(); got != Open {
				t.Errorf("New(%d, 1s) after one failure: State() = %v, want open (threshold clamped to 1)", th, got)
			}
		}
		if got := New(1<<40, time.Second).threshold; got != MaxThreshold {
			t.Errorf("New(1<<40).threshold = %d, want %d", got, MaxThreshold)
		}
	})
}

func TestStateString(t *testing.T) {
	for s, want := range map[State]string{Closed: "closed", Open: "open", HalfOpen: "half-open"} {
		if got := s.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", s, got, want)
		}
	}
}
