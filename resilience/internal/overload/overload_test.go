package overload_test

import (
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sundial-go/sundial/resilience"
	"github.com/sundial-go/sundial/resilience/internal/overload"
)

// The backend of every scenario: C·S = 50 calls at once, each taking S.
const (
	workers  = 50
	service  = 200 * time.Millisecond
	capacity = workers / 0.2 // C, calls per second
	window   = time.Second   // the controller's default window
)

// adaptive returns the limits of an adaptive concurrency limit with its
// defaults, but for a queue of queue calls and the changes of change.
func adaptive(queue int, change func(*resilience.Adaptive)) *resilience.Limits {
	p := resilience.Policy{ConcurrencyLimit: resilience.AdaptiveLimit, ConcurrencyQueueLimit: queue}
	if change != nil {
		change(&p.Adaptive)
	}
	return resilience.NewLimits("sim.op", p)
}

// run runs the scenario s returns in a synctest bubble (where the limits
// must be made: they read the bubble's clock).
func run(t *testing.T, s func() overload.Scenario) overload.Result {
	t.Helper()
	var r overload.Result
	synctest.Test(t, func(t *testing.T) { r = overload.Run(s()) })
	return r
}

// inBand reports whether limit is within ±25 % of C·S.
func inBand(limit int) bool { return limit >= workers*3/4 && limit <= workers*5/4 }

func logTrace(t *testing.T, r overload.Result) {
	t.Helper()
	for i, p := range r.Trace {
		if i%10 == 0 {
			t.Logf("t=%v limit=%d adaptive=%d inflight=%d queue=%d", p.At.Round(time.Millisecond), p.Limit, p.Adaptive, p.InFlight, p.Queue)
		}
	}
}

// TestAdaptiveConverges: from its default start (20) under 2× overload,
// the limit is within ±25 % of C·S after 10 windows and stays there.
func TestAdaptiveConverges(t *testing.T) {
	t.Parallel()
	r := run(t, func() overload.Scenario {
		return overload.Scenario{Limits: adaptive(0, nil), Backend: overload.NewBackend(workers, service),
			Rate: 2 * capacity, Duration: 20 * time.Second, Seed: 1, Deadline: 10 * service}
	})
	logTrace(t, r)
	checkBand(t, r, 10*window+window/2, 20*time.Second)
}

// checkBand checks that the limit is within ±25 % of C·S in [from, to).
func checkBand(t *testing.T, r overload.Result, from, to time.Duration) {
	t.Helper()
	for _, p := range r.Trace {
		if p.At >= from && p.At < to && !inBand(p.Adaptive) {
			t.Fatalf("at %v the limit is %d; want %d ± 25 %%", p.At, p.Adaptive, workers)
		}
	}
}

// TestAdaptiveAtThreeTimesOverload: at 3× the backend's capacity, with a
// queue, the calls that arrive once the limit has converged succeed
// before their deadline at ≥ 90 % of the capacity, and the p99 of the
// admitted ones is ≤ 3× the service time.
func TestAdaptiveAtThreeTimesOverload(t *testing.T) {
	t.Parallel()
	r := run(t, func() overload.Scenario {
		return overload.Scenario{Limits: adaptive(20, nil), Backend: overload.NewBackend(workers, service),
			Rate: 3 * capacity, Duration: 30 * time.Second, Seed: 2, Deadline: 5 * service}
	})
	logTrace(t, r)
	from, to := 10*window, 30*time.Second
	if g := r.Goodput(from, to, "*"); g < 0.9*capacity {
		t.Errorf("goodput = %.0f calls/s; want ≥ %.0f (90 %% of %.0f)", g, 0.9*capacity, float64(capacity))
	}
	if p99 := r.AdmittedLatency(from, to, 0.99); p99 > 3*service {
		t.Errorf("p99 of admitted calls = %v; want ≤ %v", p99, 3*service)
	}
	t.Logf("goodput %.0f/s of %.0f, p99 %v", r.Goodput(from, to, "*"), float64(capacity), r.AdmittedLatency(from, to, 0.99))
}

// TestAdaptiveHoldsBelowTheKnee is the peer bar in the simulator:
// at 4× overload of the peer benchmark's backend (40 workers, service
// 200 ms ±50 %, deadline 2 s), from 3 s on, the p99 of the admitted calls
// stays within 10 ms of the longest service time (no call waits for a
// worker more than a moment: the limit sits at the knee, not past it),
// and goodput is ≥ 75 % of the capacity (the limit is not far below it).
func TestAdaptiveHoldsBelowTheKnee(t *testing.T) {
	t.Parallel()
	const workers, jitter = 40, 0.5
	capacity := workers / service.Seconds()
	longest := time.Duration((1 + jitter) * float64(service))
	r := run(t, func() overload.Scenario {
		return overload.Scenario{Limits: adaptive(0, nil), Backend: overload.NewBackend(workers, service),
			Rate: 4 * capacity, Duration: 30 * time.Second, Seed: 7, Jitter: jitter, Deadline: 10 * service}
	})
	logTrace(t, r)
	from, to := 3*window, 30*time.Second
	g, p99 := r.Goodput(from, to, "*"), r.AdmittedLatency(from, to, 0.99)
	if g < 0.75*capacity {
		t.Errorf("goodput = %.0f calls/s; want ≥ %.0f (75 %% of %.0f)", g, 0.75*capacity, capacity)
	}
	if p99 > longest+10*time.Millisecond {
		t.Errorf("p99 of admitted calls = %v; want ≤ %v (the longest service time) + 10ms", p99, longest)
	}
	t.Logf("goodput %.0f/s of %.0f, p99 %v", g, capacity, p99)
}

// TestAdaptiveFollowsASlowdown: when the backend's service time grows 5×,
// the limit falls within 3 s (to at most 60 % of what it was), stays down
// while the latency is above the healthy ceiling, and is back within
// ±25 % of C·S within 10 s after the backend recovers.
func TestAdaptiveFollowsASlowdown(t *testing.T) {
	t.Parallel()
	slow, recover := 15*time.Second, 30*time.Second
	r := run(t, func() overload.Scenario {
		b := overload.NewBackend(workers, service)
		return overload.Scenario{Limits: adaptive(0, func(a *resilience.Adaptive) { a.HealthyLatency = 2 * service }),
			Backend: b, Rate: 2 * capacity, Duration: 45 * time.Second, Seed: 3, Deadline: 10 * service,
			Events: []overload.Event{{At: slow, Do: func() { b.SetService(5 * service) }}, {At: recover, Do: func() { b.SetService(service) }}}}
	})
	logTrace(t, r)
	before := r.Limits(slow-time.Second, slow)
	fell := r.Limits(slow+3*time.Second, slow+3*time.Second+200*time.Millisecond)
	if len(before) == 0 || len(fell) == 0 || !inBand(before[len(before)-1]) || fell[0]*10 > before[len(before)-1]*6 {
		t.Fatalf("limit before the slowdown %v, 3 s into it %v; want in band, then ≤ 60 %% of it", before, fell)
	}
	for _, n := range r.Limits(slow+3*time.Second, recover) {
		if n > fell[0] {
			t.Fatalf("during the slowdown the limit grew from %d to %d above the healthy ceiling", fell[0], n)
		}
	}
	for _, n := range r.Limits(recover+10*time.Second, 45*time.Second) {
		if !inBand(n) {
			t.Fatalf("10 s after the recovery the limit is %d; want %d ± 25 %%", n, workers)
		}
	}
}

// TestAdaptiveIgnoresCallersThatGiveUp: under 4× overload, for 10 s,
// half the callers give up a twentieth of a service time after they
// arrive — they cancel, or their own deadline passes; before, during and
// after, the limit stays within ±25 % of C·S and within 10 % of where it
// was when they began. (Were such a call a sample, its short latency would
// lower the baseline, and the limit would fall out of the band when the
// callers stop giving up.)
func TestAdaptiveIgnoresCallersThatGiveUp(t *testing.T) {
	t.Parallel()
	from, to := 12*time.Second, 22*time.Second
	for _, tc := range []struct {
		name   string
		giveUp func(a *overload.Arrival)
	}{
		{"cancel", func(a *overload.Arrival) { a.CancelAfter = service / 20 }},
		{"caller deadline", func(a *overload.Arrival) { a.Deadline, a.CallerDeadline = service/20, true }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := run(t, func() overload.Scenario {
				return overload.Scenario{Limits: adaptive(0, nil), Backend: overload.NewBackend(workers, service),
					Rate: 4 * capacity, Duration: 32 * time.Second, Seed: 4, Deadline: 10 * service,
					Shape: func(a *overload.Arrival, rng *rand.Rand) {
						if a.At >= from && a.At < to && rng.IntN(2) == 0 {
							tc.giveUp(a)
						}
					}}
			})
			logTrace(t, r)
			admitted, gaveUp := 0, 0
			for _, c := range r.Calls {
				if c.At >= from && c.At < to && c.Admitted {
					admitted++
					if c.Err != nil {
						gaveUp++
					}
				}
			}
			if gaveUp*3 < admitted {
				t.Fatalf("%d of the %d admitted calls gave up; want about half", gaveUp, admitted)
			}
			checkBand(t, r, 10*window+window/2, 32*time.Second)
			at := r.Limits(from-window/2, from)[0]
			for _, p := range r.Trace {
				if p.At >= from && p.At < 32*time.Second && (p.Adaptive*10 < at*9 || p.Adaptive*10 > at*11) {
					t.Fatalf("at %v the limit is %d; want %d ± 10 %%, where it was when they began", p.At, p.Adaptive, at)
				}
			}
		})
	}
}

// TestAdaptiveReloadKeepsTheLearnedLimit: a reload that changes only the
// controller's parameters keeps the limit it learned, clamped to the new
// bounds (a new InitialLimit does not restart it); raised bounds let it
// find the knee again.
func TestAdaptiveReloadKeepsTheLearnedLimit(t *testing.T) {
	t.Parallel()
	r := run(t, func() overload.Scenario {
		l := adaptive(0, nil)
		update := func(maxLimit int) func() {
			return func() {
				l.Update(resilience.Policy{ConcurrencyLimit: resilience.AdaptiveLimit,
					Adaptive: resilience.Adaptive{MaxLimit: maxLimit, InitialLimit: 5}})
			}
		}
		return overload.Scenario{Limits: l, Backend: overload.NewBackend(workers, service),
			Rate: 2 * capacity, Duration: 24 * time.Second, Seed: 5, Deadline: 10 * service,
			Events: []overload.Event{{At: 12*time.Second + 50*time.Millisecond, Do: update(40)}, {At: 16*time.Second + 50*time.Millisecond, Do: update(0)}}}
	})
	logTrace(t, r)
	checkBand(t, r, 11*time.Second, 12*time.Second)
	for _, p := range r.Trace {
		if p.At > 12*time.Second+50*time.Millisecond && p.At < 16*time.Second && (p.Limit != 40 || p.Adaptive != 40) {
			t.Fatalf("at %v, after MaxLimit 40, the limit is %d (controller %d); want 40", p.At, p.Limit, p.Adaptive)
		}
	}
	checkBand(t, r, 17*time.Second, 24*time.Second)
}

// TestAdaptiveShadow: in shadow mode the static limit (here twice the
// knee) stays enforced while the controller reports the limit it would
// apply; switching to "adaptive" enforces what the shadow learned at once.
// The traffic grows to 2× overload over 5 s: a shadow learns the latency
// of unqueued calls while the load is below the knee (it cannot lower the
// load to see it).
func TestAdaptiveShadow(t *testing.T) {
	t.Parallel()
	r := run(t, func() overload.Scenario {
		l := resilience.NewLimits("sim.op", resilience.Policy{ConcurrencyLimit: 100, Adaptive: resilience.Adaptive{Shadow: true}})
		return overload.Scenario{Limits: l, Backend: overload.NewBackend(workers, service),
			Rate: 2 * capacity, Ramp: 5 * time.Second, Duration: 24 * time.Second, Seed: 6, Deadline: 10 * service,
			Events: []overload.Event{{At: 16*time.Second + 50*time.Millisecond, Do: func() {
				l.Update(resilience.Policy{ConcurrencyLimit: resilience.AdaptiveLimit})
			}}}}
	})
	logTrace(t, r)
	for _, p := range r.Trace {
		if p.At > 0 && p.At < 16*time.Second && p.Limit != 100 {
			t.Fatalf("at %v, in shadow mode, the limit enforced is %d; want 100", p.At, p.Limit)
		}
		if p.At > 16*time.Second+50*time.Millisecond && p.Limit != p.Adaptive {
			t.Fatalf("at %v, adaptive, the limit enforced is %d, the controller's %d", p.At, p.Limit, p.Adaptive)
		}
	}
	checkBand(t, r, 12*time.Second, 24*time.Second)
}

// TestAdaptiveAdmitsNominalLoad: offered exactly the capacity of the peer
// benchmark's backend (40 workers, service 200 ms ±50 %), random arrivals
// keep 40 calls in flight on average, and a limit at that mean would turn
// away one in eight (Erlang's loss formula). Once the knee is found (from
// 5 s), the limit keeps room for the bursts above it: ≥ 97 % of the calls
// are admitted and succeed, and the limit stays at or above the knee.
//
// The limit learns the load offered from the calls it turns away too: in
// "after 2×", the knee is found at twice the capacity and the load falls
// to 1× at 15 s, where the limit at the knee is as full as the calls
// that end can tell.
func TestAdaptiveAdmitsNominalLoad(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		load float64
		from time.Duration
	}{{"from the start", 1, 5 * window}, {"after 2×", 2, 20 * time.Second}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			admitsNominalLoad(t, tc.load, tc.from)
		})
	}
}

// admitsNominalLoad offers load times the capacity until 15 s (15 s: 0),
// then the capacity, and checks the calls that arrive from from on.
func admitsNominalLoad(t *testing.T, load float64, from time.Duration) {
	const workers, jitter = 40, 0.5
	capacity := workers / service.Seconds()
	r := run(t, func() overload.Scenario {
		return overload.Scenario{Limits: adaptive(0, nil), Backend: overload.NewBackend(workers, service),
			Rate: load * capacity, Duration: 60 * time.Second, Seed: 8, Jitter: jitter, Deadline: 10 * service,
			Shape: func(a *overload.Arrival, rng *rand.Rand) { a.Skip = a.At >= 15*time.Second && rng.Float64() >= 1/load }}
	})
	logTrace(t, r)
	to := 60 * time.Second
	offered, good := 0, 0
	for _, c := range r.Calls {
		if c.At >= from && c.At < to {
			offered++
			if c.Good() {
				good++
			}
		}
	}
	if good*100 < offered*97 {
		t.Errorf("%d of %d calls succeeded (%.1f %%); want ≥ 97 %%", good, offered, 100*float64(good)/float64(offered))
	}
	for _, n := range r.Limits(from, to) {
		if n < workers*9/10 {
			t.Fatalf("the limit fell to %d; want at least the knee, %d, less a tenth", n, workers)
		}
	}
	t.Logf("%d of %d calls succeeded (%.1f %%), p99 %v", good, offered, 100*float64(good)/float64(offered), r.AdmittedLatency(from, to, 0.99))
}
