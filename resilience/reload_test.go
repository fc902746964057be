package resilience_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience"
)

// code returns the outcome code of a call ("" for success).
func code(err error) string {
	if err == nil {
		return ""
	}
	return pipeline.AsError(err).Code()
}

// burst makes n calls with a caller deadline of 10 ms (a call that would
// wait for a later window is turned away at once) and returns how many
// were admitted; every other one must be a rate-limit rejection.
func admitBurst(t *testing.T, h pipeline.Handler, n int) int {
	t.Helper()
	admitted := 0
	for range n {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		_, err := h(ctx, pipeline.NewInvocation(pipeline.Spec{Operation: op(opID)}))
		cancel()
		switch code(err) {
		case "":
			admitted++
		case resilience.CodeRateLimited:
		default:
			t.Fatalf("call: %v, want success or %s", err, resilience.CodeRateLimited)
		}
	}
	return admitted
}

// TestUpdatePermitLimitInPlace: PermitLimit 100 -> 10 in the middle of a
// window keeps the permits taken: that window admits nothing more once 10
// are used (and up to 10 when fewer were), the next ones 10 each; back to
// 100 mid-window, that window admits up to 100 in all. Both
// representations of the window: without a queue (lock-free) and with one.
func TestUpdatePermitLimitInPlace(t *testing.T) {
	for _, queue := range []int{0, 5} {
		t.Run(map[int]string{0: "no-queue", 5: "queue"}[queue], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := resilience.Policy{PermitLimit: 100, Window: time.Second, QueueLimit: queue}
				h, l := limitStack(t, p, okHandler)
				time.Sleep(100 * time.Millisecond)
				if got := admitBurst(t, h, 40); got != 40 {
					t.Fatalf("window 0 before the update admitted %d, want 40", got)
				}
				p.PermitLimit = 10
				l.Update(p)
				if got := admitBurst(t, h, 50); got != 0 {
					t.Errorf("window 0 after 100 -> 10 with 40 used admitted %d more, want 0", got)
				}
				if q := l.State().Window; q.Limit != 10 || q.Remaining != 0 {
					t.Errorf("quota = %+v, want limit 10, none remaining", q)
				}
				time.Sleep(time.Second) // window 1, at 1.1 s
				if got := admitBurst(t, h, 50); got != 10 {
					t.Errorf("window 1 admitted %d, want 10", got)
				}
				p.PermitLimit = 100
				l.Update(p)
				if got := admitBurst(t, h, 150); got != 90 {
					t.Errorf("window 1 after 10 -> 100 admitted %d more, want 90", got)
				}
				time.Sleep(time.Second) // window 2
				if got := admitBurst(t, h, 5); got != 5 {
					t.Fatalf("window 2 admitted %d, want 5", got)
				}
				p.PermitLimit = 10
				l.Update(p)
				if got := admitBurst(t, h, 50); got != 5 {
					t.Errorf("window 2 after 100 -> 10 with 5 used admitted %d more, want 5", got)
				}
			})
		})
	}
}

// TestUpdateLowerThenRaiseInOneWindow: 100 -> 10 with 60 permits taken,
// then back to 100 in the same window: the window admits 100 in all, not
// 60 plus a fresh 90.
func TestUpdateLowerThenRaiseInOneWindow(t *testing.T) {
	for _, queue := range []int{0, 5} {
		t.Run(map[int]string{0: "no-queue", 5: "queue"}[queue], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := resilience.Policy{PermitLimit: 100, Window: time.Second, QueueLimit: queue}
				h, l := limitStack(t, p, okHandler)
				time.Sleep(100 * time.Millisecond)
				admitted := admitBurst(t, h, 60)
				p.PermitLimit = 10
				l.Update(p)
				admitted += admitBurst(t, h, 20)
				p.PermitLimit = 100
				l.Update(p)
				admitted += admitBurst(t, h, 150)
				if admitted != 100 {
					t.Errorf("window admitted %d through 100 -> 10 -> 100, want 100", admitted)
				}
				if q := l.State().Window; q.Limit != 100 || q.Remaining != 0 {
					t.Errorf("quota = %+v, want limit 100, none remaining", q)
				}
			})
		})
	}
}

// TestUpdateKeepsQueuedCalls: with the window used up and 30 calls queued
// for later windows, PermitLimit 10 -> 5 loses none of them and admits
// none past the new limit: they are admitted 5 per window, oldest first.
// 10 -> 20 instead admits the 10 oldest at once, in the current window.
func TestUpdateKeepsQueuedCalls(t *testing.T) {
	for _, tc := range []struct {
		name     string
		newLimit int
		want     map[int64]int // admissions per window, the 10 of window 0 included
	}{
		{"lower", 5, map[int64]int{0: 10, 1: 5, 2: 5, 3: 5, 4: 5, 5: 5, 6: 5}},
		{"higher", 20, map[int64]int{0: 20, 1: 20}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				var mu sync.Mutex
				perWindow := map[int64]int{}
				h, l := limitStack(t, resilience.Policy{PermitLimit: 10, Window: time.Second, QueueLimit: 30},
					func(context.Context, *pipeline.Invocation) (any, error) {
						mu.Lock()
						perWindow[int64(time.Since(start)/time.Second)]++
						mu.Unlock()
						return nil, nil
					})
				var wg sync.WaitGroup
				var failed atomic.Int64
				call := func() {
					defer wg.Done()
					if _, err := h(context.Background(), pipeline.NewInvocation(pipeline.Spec{Operation: op(opID)})); err != nil {
						failed.Add(1)
						t.Errorf("call: %v", err)
					}
				}
				for range 10 {
					wg.Add(1)
					call()
				}
				for range 30 {
					wg.Add(1)
					go call()
				}
				synctest.Wait()
				if d := l.State().RateQueue; d != 30 {
					t.Fatalf("queue depth = %d, want 30", d)
				}
				l.Update(resilience.Policy{PermitLimit: tc.newLimit, Window: time.Second, QueueLimit: 30})
				wg.Wait()
				if failed.Load() != 0 {
					t.Fatalf("%d queued calls failed", failed.Load())
				}
				for w, n := range perWindow {
					if n != tc.want[w] {
						t.Errorf("window %d admitted %d, want %d (all: %v)", w, n, tc.want[w], perWindow)
					}
				}
				if len(perWindow) != len(tc.want) {
					t.Errorf("admissions per window = %v, want %v", perWindow, tc.want)
				}
			})
		})
	}
}

// TestUpdateWindowSecondsAtTheNextBoundary: a new WindowSeconds applies
// from the end of the current window: until then the current window and
// its permits stand; then windows of the new length follow back to back.
func TestUpdateWindowSecondsAtTheNextBoundary(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := resilience.Policy{PermitLimit: 10, Window: time.Second}
		h, l := limitStack(t, p, okHandler)
		time.Sleep(500 * time.Millisecond)
		if got := admitBurst(t, h, 8); got != 8 {
			t.Fatalf("admitted %d, want 8", got)
		}
		p.Window = 4 * time.Second
		l.Update(p)
		if got := admitBurst(t, h, 5); got != 2 {
			t.Errorf("rest of the 1 s window admitted %d, want 2", got)
		}
		time.Sleep(500 * time.Millisecond) // 1 s: the first 4 s window [1 s, 5 s)
		if got := admitBurst(t, h, 6); got != 6 {
			t.Errorf("start of the 4 s window admitted %d, want 6", got)
		}
		time.Sleep(3 * time.Second) // 4 s: same window
		if got := admitBurst(t, h, 6); got != 4 {
			t.Errorf("end of the 4 s window admitted %d, want 4", got)
		}
		if q := l.State().Window; q.Window != 4*time.Second || q.Reset != time.Second {
			t.Errorf("quota = %+v, want a 4 s window resetting in 1 s", q)
		}
		time.Sleep(time.Second) // 5 s: the next one
		if got := admitBurst(t, h, 12); got != 10 {
			t.Errorf("next 4 s window admitted %d, want 10", got)
		}
	})
}

// TestUpdateConcurrencyInPlace: the calls in flight keep their slots; a
// lower ConcurrencyLimit admits nobody until fewer than it are in flight;
// a shorter ConcurrencyQueueLimit turns the newest excess waiters away
// with KERNEL_UNAVAILABLE_003.
func TestUpdateConcurrencyInPlace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		var running atomic.Int64
		h, l := limitStack(t, resilience.Policy{ConcurrencyLimit: 4, ConcurrencyQueueLimit: 4},
			func(context.Context, *pipeline.Invocation) (any, error) {
				running.Add(1)
				<-release
				running.Add(-1)
				return nil, nil
			})
		errs := make(chan error, 8)
		for range 8 {
			go func() {
				_, err := h(context.Background(), pipeline.NewInvocation(pipeline.Spec{Operation: op(opID)}))
				errs <- err
			}()
			synctest.Wait() // queue in order
		}
		if l.State().InFlight != 4 || l.State().ConcurrencyQueue != 4 {
			t.Fatalf("in flight %d, queued %d; want 4 and 4", l.State().InFlight, l.State().ConcurrencyQueue)
		}
		l.Update(resilience.Policy{ConcurrencyLimit: 2, ConcurrencyQueueLimit: 1})
		for range 3 {
			if err := <-errs; code(err) != resilience.CodeConcurrencyLimited {
				t.Errorf("excess waiter: %v, want %s", err, resilience.CodeConcurrencyLimited)
			}
		}
		if l.State().InFlight != 4 || l.State().ConcurrencyQueue != 1 {
			t.Fatalf("after the update: in flight %d, queued %d; want 4 and 1", l.State().InFlight, l.State().ConcurrencyQueue)
		}
		for _, want := range []int64{3, 2} { // in flight still >= 2: the waiter stays queued
			release <- struct{}{}
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
			if running.Load() != want || l.State().ConcurrencyQueue != 1 {
				t.Fatalf("running %d, queued %d; want %d and 1", running.Load(), l.State().ConcurrencyQueue, want)
			}
		}
		release <- struct{}{} // 1 in flight: the waiter gets the slot
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if running.Load() != 2 || l.State().ConcurrencyQueue != 0 {
			t.Fatalf("running %d, queued %d; want 2 and 0", running.Load(), l.State().ConcurrencyQueue)
		}
		close(release)
		for range 2 {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
	})
}

var errBoom = errors.New("boom")

// TestUpdateKeepsTheBreaker: a breaker open when an unrelated key changes
// stays open, with its break; when its own thresholds change, an open
// breaker stays open until its current break ends (the new BreakSeconds
// applies from its next opening), and a closed one keeps its run of
// failures against the new FailureThreshold.
func TestUpdateKeepsTheBreaker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fail := true
		h, l := limitStack(t, resilience.Policy{FailureThreshold: 2, BreakDuration: 10 * time.Second},
			func(context.Context, *pipeline.Invocation) (any, error) {
				if fail {
					return nil, errBoom
				}
				return nil, nil
			})
		do := func() error {
			_, err := h(context.Background(), pipeline.NewInvocation(pipeline.Spec{Operation: op(opID)}))
			return err
		}
		_, _ = do(), do()
		if l.State().Breaker != resilience.BreakerOpen {
			t.Fatalf("breaker %v, want open", l.State().Breaker)
		}
		time.Sleep(3 * time.Second)
		l.Update(resilience.Policy{FailureThreshold: 2, BreakDuration: 10 * time.Second, PermitLimit: 100, ConcurrencyLimit: 5})
		if l.State().Breaker != resilience.BreakerOpen || l.State().BreakerOpenFor != 7*time.Second {
			t.Fatalf("after an unrelated update: breaker %v for %v, want open for 7s", l.State().Breaker, l.State().BreakerOpenFor)
		}
		if err := do(); code(err) != resilience.CodeCircuitOpen {
			t.Fatalf("call: %v, want %s", err, resilience.CodeCircuitOpen)
		}
		l.Update(resilience.Policy{FailureThreshold: 3, BreakDuration: time.Minute})
		if l.State().Breaker != resilience.BreakerOpen || l.State().BreakerOpenFor != 7*time.Second {
			t.Fatalf("after a threshold change: breaker %v for %v, want open for 7s", l.State().Breaker, l.State().BreakerOpenFor)
		}
		time.Sleep(7 * time.Second)
		fail = false
		if err := do(); err != nil { // the probe
			t.Fatalf("probe: %v", err)
		}
		if l.State().Breaker != resilience.BreakerClosed {
			t.Fatalf("breaker %v after a good probe, want closed", l.State().Breaker)
		}
		fail = true
		_, _ = do(), do() // 2 of 3
		l.Update(resilience.Policy{FailureThreshold: 2, BreakDuration: time.Minute})
		if l.State().Breaker != resilience.BreakerClosed {
			t.Fatalf("breaker %v, want closed", l.State().Breaker)
		}
		_ = do() // the run already reaches 2: the next failure opens
		if l.State().Breaker != resilience.BreakerOpen || l.State().BreakerOpenFor != time.Minute {
			t.Fatalf("breaker %v for %v, want open for the new minute", l.State().Breaker, l.State().BreakerOpenFor)
		}
	})
}

// TestUpdateGainsAndLosesLimits: an operation without limits gains a rate
// limit by Update (it is in force for the next call), and loses it again.
func TestUpdateGainsAndLosesLimits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, l := limitStack(t, resilience.Policy{}, okHandler)
		if got := admitBurst(t, h, 5); got != 5 {
			t.Fatalf("no limits: admitted %d, want 5", got)
		}
		l.Update(resilience.Policy{PermitLimit: 2, Window: time.Second})
		if got := admitBurst(t, h, 5); got != 2 {
			t.Errorf("gained PermitLimit 2: admitted %d, want 2", got)
		}
		l.Update(resilience.Policy{})
		if got := admitBurst(t, h, 5); got != 5 {
			t.Errorf("lost the limit: admitted %d, want 5", got)
		}
	})
}

// TestUpdateScopeKeepsTheBreaker: a change of Scope starts the window and
// the slots of the new scope, and keeps the breaker (per process in both).
func TestUpdateScopeKeepsTheBreaker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := resilience.Policy{FailureThreshold: 1, BreakDuration: time.Minute, PermitLimit: 5}
		h, l := limitStack(t, p, func(context.Context, *pipeline.Invocation) (any, error) { return nil, errBoom })
		_, _ = h(context.Background(), pipeline.NewInvocation(pipeline.Spec{Operation: op(opID)}))
		for _, scope := range []resilience.Scope{resilience.ScopeCluster, resilience.ScopeProcess} {
			p.Scope = scope
			l.Update(p)
			if l.State().Breaker != resilience.BreakerOpen || l.Policy().Scope != scope {
				t.Errorf("after the move to %s: breaker %v, scope %q; want open", scope, l.State().Breaker, l.Policy().Scope)
			}
		}
	})
}

// TestUpdateWindowSecondsWithQueuedCalls: a new WindowSeconds with calls
// queued. The queued calls keep their place and are admitted on the old
// schedule (at most PermitLimit per old window); the new length starts at
// the boundary after the newest of them, so that no window of the new
// length admits more than PermitLimit (it was 4 and 4 in 2 s windows for a
// limit of 2 when the queued calls were counted in the first new window
// only). Until then nobody more is queued.
func TestUpdateWindowSecondsWithQueuedCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		var mu sync.Mutex
		admittedAt := map[time.Duration]int{} // by the second the call started
		p := resilience.Policy{PermitLimit: 2, Window: time.Second, QueueLimit: 6}
		h, l := limitStack(t, p, func(context.Context, *pipeline.Invocation) (any, error) {
			mu.Lock()
			admittedAt[time.Since(start).Truncate(time.Second)]++
			mu.Unlock()
			return nil, nil
		})
		time.Sleep(500 * time.Millisecond)
		var wg sync.WaitGroup
		for range 8 { // 2 now, 6 queued for the windows at 1, 2 and 3 s
			wg.Go(func() {
				if _, err := h(context.Background(), pipeline.NewInvocation(pipeline.Spec{Operation: op(opID)})); err != nil {
					t.Errorf("call: %v", err)
				}
			})
		}
		synctest.Wait()
		if d := l.State().RateQueue; d != 6 {
			t.Fatalf("queue depth = %d, want 6", d)
		}
		p.Window = 2 * time.Second
		l.Update(p)
		if got := admitBurst(t, h, 3); got != 0 {
			t.Errorf("after the change, in a full window: admitted %d, want 0", got)
		}
		wg.Wait() // the queued calls, on the old schedule
		for s := time.Duration(0); s < 4*time.Second; s += time.Second {
			if admittedAt[s] != 2 {
				t.Errorf("old window at %v admitted %d, want 2", s, admittedAt[s])
			}
		}
		time.Sleep(4*time.Second - time.Since(start)) // 4 s: the first 2 s window, [4 s, 6 s)
		a := admitBurst(t, h, 5)
		time.Sleep(time.Second) // 5 s: same window
		b := admitBurst(t, h, 5)
		time.Sleep(time.Second) // 6 s: the next one
		c := admitBurst(t, h, 5)
		if a+b != 2 || c != 2 {
			t.Errorf("2 s windows admitted %d+%d and %d, want 2 and 2", a, b, c)
		}
	})
}
