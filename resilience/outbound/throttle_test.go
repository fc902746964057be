package outbound

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sundial-go/sundial/pipeline"
)

// throttled builds a Dependency of one attempt per call, no breaker, and a
// throttle (K 2, 10 s) drawing from a seeded generator.
func throttledDep(t *testing.T) *Dependency {
	t.Helper()
	p := DefaultPolicy()
	p.Attempts, p.FailureThreshold, p.Throttle = 1, 0, true
	d := dep(t, p)
	d.coin = rand.New(rand.NewPCG(1, 2)).Float64
	return d
}

// tally is what one window of a drive saw.
type tally struct {
	offered, refused   int // calls made, calls the throttle refused
	requests, accepted int // attempts the dependency judged, and accepted
}

// formula is the rejection probability of the window's own counts (K 2).
func (w tally) formula() float64 {
	return max(0, float64(w.requests-2*w.accepted)/float64(w.requests+1))
}

func (w tally) rate() float64 { return float64(w.refused) / float64(w.offered) }

// drive calls d every 5 ms (200 calls a second) for windows windows of
// 10 s, and tallies each. answer(n) is the answer to the dependency's
// attempt number n (counted over the whole drive); every third call is a
// caller fault instead when faults is set, which must count for nothing.
func drive(t *testing.T, d *Dependency, windows int, faults bool, answer func(n int) error) []tally {
	t.Helper()
	out := make([]tally, windows)
	received := 0
	for w := range out {
		end := time.Now().Add(10 * time.Second)
		for i := 0; time.Now().Before(end); i++ {
			fault := faults && i%3 == 2
			err := d.Do(context.Background(), func(context.Context) error {
				if fault {
					return pipeline.NewError(pipeline.KindValidation, "APP_VALIDATION_001", "bad")
				}
				received++
				out[w].requests++
				err := answer(received)
				if err == nil {
					out[w].accepted++
				}
				return err
			})
			out[w].offered++
			if pe, ok := errors.AsType[*pipeline.Error](err); ok && pe.Code() == CodeDependencyThrottled {
				out[w].refused++
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	return out
}

// tenth accepts one attempt in ten.
func tenth(n int) error {
	if n%10 == 0 {
		return nil
	}
	return unavailable()
}

// TestThrottleFollowsTheFormula: a dependency accepts one attempt in ten
// (K 2). From the second window on, the share of calls refused locally in
// each window is within 5 % of max(0, (requests − 2·accepts)/(requests + 1))
// computed from the same window's counts. Caller faults (every third call
// of the second run) are not counted: the same holds with them.
func TestThrottleFollowsTheFormula(t *testing.T) {
	for _, faults := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			d := throttledDep(t)
			ws := drive(t, d, 8, faults, tenth)
			for i, w := range ws[1:] {
				got, want := w.rate(), w.formula()
				t.Logf("faults %v, window %d: %d calls, %d refused (%.3f); %d requests, %d accepts: formula %.3f",
					faults, i+2, w.offered, w.refused, got, w.requests, w.accepted, want)
				if want < 0.5 || got < want*0.95 || got > want*1.05 {
					t.Errorf("window %d: refused %.3f of calls, formula %.3f: not within 5 %%", i+2, got, want)
				}
			}
		})
	}
}

// TestThrottleStopsWithinOneWindow: after windows of a dependency that
// accepts one attempt in ten, it accepts every attempt. The throttle
// refuses no call once a window has passed, and none in the window after.
func TestThrottleStopsWithinOneWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := throttledDep(t)
		if ws := drive(t, d, 3, false, tenth); ws[2].refused == 0 {
			t.Fatal("the throttle refused nothing while the dependency failed")
		}
		healthy := time.Now()
		var last time.Time
		for time.Since(healthy) < 20*time.Second {
			err := d.Do(context.Background(), func(context.Context) error { return nil })
			if err != nil {
				last = time.Now()
			}
			time.Sleep(5 * time.Millisecond)
		}
		if after := last.Sub(healthy); last.IsZero() || after >= 10*time.Second {
			t.Fatalf("last refusal %v after the dependency healed (zero: none), want some and within 10 s", after)
		} else {
			t.Logf("last refusal %v after the dependency healed", after)
		}
		if st := d.Stats(); st.Rejection != 0 || st.WindowRequests != st.WindowAccepts {
			t.Fatalf("stats %+v: want rejection 0, every request accepted", st)
		}
	})
}

// TestThrottleIgnoresNeutralOutcomes: caller faults, the caller's cancel
// and the caller's deadline leave the throttle's window and probability as
// they were.
func TestThrottleIgnoresNeutralOutcomes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := throttledDep(t)
		drive(t, d, 1, false, tenth)
		th := d.cur.Load().throttle // start at a bucket's start: no bucket ends below
		time.Sleep(th.width - time.Since(th.base)%th.width)
		before := d.Stats()
		if before.Rejection == 0 || before.WindowRequests == 0 {
			t.Fatalf("stats %+v: want a throttle at work", before)
		}
		d.coin = func() float64 { return 0.999999 } // let the neutral calls through
		for i := range 30 {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
			err := d.Do(ctx, func(actx context.Context) error {
				switch i % 3 {
				case 0:
					return pipeline.NewError(pipeline.KindNotFound, "APP_NOT_FOUND_001", "no such order")
				case 1:
					cancel() // the caller leaves
				}
				<-actx.Done() // case 2: the caller's deadline passes
				return actx.Err()
			})
			cancel()
			if err == nil {
				t.Fatalf("call %d succeeded", i)
			}
		}
		after := d.Stats()
		if after.WindowRequests != before.WindowRequests || after.WindowAccepts != before.WindowAccepts ||
			after.Rejection != before.Rejection || after.Throttled != before.Throttled {
			t.Fatalf("after neutral calls %+v, before %+v", after, before)
		}
	})
}

// TestThrottleRefusalIsNotRetried: a refused call sends nothing and is not
// retried. Its outcome is UNAVAILABLE CodeDependencyThrottled, naming the
// dependency, with a retry-after of one bucket. A retry the throttle
// refuses ends the call with the last answer.
func TestThrottleRefusalIsNotRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := DefaultPolicy()
		p.FailureThreshold, p.Throttle = 0, true
		d := dep(t, p)
		draws := []float64{0.99, 0.99, 0, 0.9, 0.1} // each call's draws, in turn
		d.coin = func() float64 { x := draws[0]; draws = draws[1:]; return x }
		sent := 0
		fail := func(context.Context) error { sent++; return unavailable() }
		_ = d.Do(context.Background(), fail) // three failed attempts: p = 3/4
		if sent != 3 {
			t.Fatalf("%d attempts, want 3", sent)
		}
		sent = 0
		err := d.Do(context.Background(), fail)
		pe, ok := errors.AsType[*pipeline.Error](err)
		if !ok || pe.Code() != CodeDependencyThrottled || pe.Kind() != pipeline.KindUnavailable || sent != 0 {
			t.Fatalf("err %v after %d attempts, want %s and none", err, sent, CodeDependencyThrottled)
		}
		if ra, has := pe.RetryAfter(); !has || ra != 500*time.Millisecond || pe.Details()["dependency"] != "billing" {
			t.Fatalf("retry-after %v (%v), details %v", ra, has, pe.Details())
		}
		n := 0 // the first attempt passes (0.9 ≥ 3/4); its retry does not (0.1 < 4/5)
		err = d.Do(context.Background(), func(context.Context) error {
			n++
			return pipeline.NewError(pipeline.KindUnavailable, "BILLING_UNAVAILABLE_002", "busy")
		})
		if pe, _ := errors.AsType[*pipeline.Error](err); n != 1 || pe == nil || pe.Code() != "BILLING_UNAVAILABLE_002" {
			t.Fatalf("%d attempts, err %v: want one, and its answer", n, err)
		}
		if st := d.Stats(); st.Throttled != 2 || !st.HasThrottle {
			t.Fatalf("stats %+v: want 2 throttled", st)
		}
	})
}

// TestThrottlePolicyErrors: a bad K or window is refused, naming its field;
// they are not checked while throttling is off.
func TestThrottlePolicyErrors(t *testing.T) {
	p := DefaultPolicy()
	p.ThrottleK, p.ThrottleWindow = 0.5, time.Millisecond
	if _, err := New("billing", p); err != nil {
		t.Fatalf("off: %v", err)
	}
	p.Throttle = true
	_, err := New("billing", p)
	for _, want := range []string{"ThrottleK: 0.5 is out of range (1 to 100)", "ThrottleWindow: 1ms is below 20ms"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want %q", err, want)
		}
	}
}

// BenchmarkThrottle is the throttle's cost per call: the check and the
// count of a success.
func BenchmarkThrottle(b *testing.B) {
	p := DefaultPolicy()
	p.Throttle = true
	d, _ := New("billing", p)
	c := &call{d: d, s: d.cur.Load(), ctx: context.Background()}
	b.ReportAllocs()
	for b.Loop() {
		if c.throttled() != nil {
			b.Fatal("refused")
		}
		c.s.throttle.record(0) // breaker.Success
	}
}

// BenchmarkDoThrottle is Do with a call that succeeds, throttle off and on.
func BenchmarkDoThrottle(b *testing.B) {
	for _, on := range []bool{false, true} {
		name := "off"
		if on {
			name = "on"
		}
		b.Run(name, func(b *testing.B) {
			p := DefaultPolicy()
			p.Throttle = on
			d, _ := New("billing", p)
			ctx := context.Background()
			ok := func(context.Context) error { return nil }
			b.ReportAllocs()
			for b.Loop() {
				_ = d.Do(ctx, ok)
			}
		})
	}
}

// TestReconfigureKeepsTheThrottle: a reload with the same window keeps the
// throttle's counts and applies a new K at once. Another window starts an
// empty one; turning throttling off drops it.
func TestReconfigureKeepsTheThrottle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := throttledDep(t)
		d.coin = func() float64 { return 0.999999 }
		for i := range 4 {
			_ = d.Do(context.Background(), func(context.Context) error {
				if i == 0 {
					return nil
				}
				return unavailable()
			})
		}
		if st := d.Stats(); st.Rejection != 2.0/5 { // (4 − 2·1) / 5
			t.Fatalf("K 2: %+v", st)
		}
		p := d.cur.Load().p
		p.ThrottleK = 3
		if err := d.Reconfigure(p); err != nil {
			t.Fatal(err)
		}
		if st := d.Stats(); st.WindowRequests != 4 || st.Rejection != 1.0/5 { // (4 − 3·1) / 5
			t.Fatalf("same window: %+v, want 4 requests kept", st)
		}
		p.ThrottleWindow = 5 * time.Second
		_ = d.Reconfigure(p)
		if st := d.Stats(); st.WindowRequests != 0 || st.Rejection != 0 {
			t.Fatalf("another window: %+v, want an empty one", st)
		}
		p.Throttle = false
		_ = d.Reconfigure(p)
		if st := d.Stats(); st.HasThrottle {
			t.Fatalf("off: %+v", st)
		}
	})
}
