package resilience_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience"
)

// This file is a small deterministic overload simulator, run under
// testing/synctest against the real limits with a static concurrency
// limit: a backend of capacity C calls at once and service time S, calls
// arriving evenly at a multiple of its capacity, each with a deadline of
// its own. (The adaptive limit's simulator can take over these cases.)

// prioOverload describes one simulated run.
type prioOverload struct {
	capacity int           // C: calls the backend serves at once; more wait inside it, first come first served
	service  time.Duration // S: time it takes to serve one
	factor   int           // arrivals per second, as a multiple of C/S
	critical int           // of every 10 arrivals, how many are critical (the rest sheddable)
	deadline time.Duration // each call's deadline, from its arrival
	length   time.Duration // how long calls arrive
	// seed, when not 0, makes arrivals a Poisson process of the same
	// rate (exponential gaps from a PCG seeded with it, so a run is
	// still exactly repeatable), and each call critical with probability
	// critical/10: bursts, as real traffic has.
	seed uint64
	// classless sends every call at the default class (a control run);
	// the calls are still tallied by the class they would have had.
	classless bool
}

// prioTally counts the calls of one class: sent, and answered with
// success before their deadline.
type prioTally struct{ sent, ok int }

// prioResult is what a run measured, by class.
type prioResult struct {
	critical, sheddable prioTally
	// maxInFlight is the most calls the limits let through at once.
	maxInFlight int
}

// run simulates o against the limits of policy p: calls of class
// critical or sheddable arrive every S/(factor·C), the pattern of classes
// repeating every 10 calls. It returns once every call has ended.
func (o prioOverload) run(t *testing.T, p resilience.Policy) prioResult {
	t.Helper()
	var res prioResult
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex // guards res and running
		running := 0
		backend := func(ctx context.Context, _ *pipeline.Invocation) (any, error) {
			tm := time.NewTimer(o.service)
			defer tm.Stop()
			select {
			case <-tm.C:
				return "done", nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		workers := make(chan struct{}, o.capacity)
		served := func(ctx context.Context, inv *pipeline.Invocation) (any, error) {
			mu.Lock()
			running++
			res.maxInFlight = max(res.maxInFlight, running)
			mu.Unlock()
			defer func() { mu.Lock(); running--; mu.Unlock() }()
			select {
			case workers <- struct{}{}:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			defer func() { <-workers }()
			return backend(ctx, inv)
		}
		h, _ := limitStack(t, p, served)
		every := o.service / time.Duration(o.factor*o.capacity)
		var wg sync.WaitGroup
		rng := rand.New(rand.NewPCG(o.seed, o.seed^0x9e3779b97f4a7c15))
		start := time.Now()
		for i := 0; time.Since(start) < o.length; i++ {
			class := pipeline.PrioritySheddable
			if o.seed == 0 && i%10 < o.critical || o.seed != 0 && rng.IntN(10) < o.critical {
				class = pipeline.PriorityCritical
			}
			deadline := time.Now().Add(o.deadline)
			sent := class
			if o.classless {
				sent = pipeline.PriorityDefault
			}
			inv := pipeline.NewInvocation(pipeline.Spec{Operation: op(opID), Priority: sent,
				CallerDeadline: deadline, Deadline: deadline, DeadlineSource: pipeline.DeadlineCaller})
			wg.Go(func() {
				_, err := h(context.Background(), inv)
				ok := err == nil && !time.Now().After(deadline)
				mu.Lock()
				defer mu.Unlock()
				tally := &res.sheddable
				if class == pipeline.PriorityCritical {
					tally = &res.critical
				}
				tally.sent++
				if ok {
					tally.ok++
				}
			})
			gap := every
			if o.seed != 0 {
				gap = time.Duration(rng.ExpFloat64() * float64(every))
			}
			time.Sleep(gap)
		}
		wg.Wait()
	})
	return res
}

// TestOverloadShedsSheddableFirst: at 3× overload with 30 % critical
// traffic, critical calls succeed ≥ 99 % while sheddable calls absorb the
// loss: they take ≥ 99 % of the failures, and the backend is kept busy
// (goodput ≥ 90 % of its capacity). Arrivals are even, or a Poisson
// process (bursts). The same traffic without classes (every call default)
// loses critical calls like the rest: the classes, not luck, save them.
func TestOverloadShedsSheddableFirst(t *testing.T) {
	for _, tt := range []struct {
		name  string
		o     prioOverload
		queue int
	}{
		{"even", prioOverload{capacity: 10, service: 100 * time.Millisecond, factor: 3, critical: 3,
			deadline: time.Second, length: 10 * time.Second}, 10},
		{"poisson", prioOverload{capacity: 50, service: 200 * time.Millisecond, factor: 3, critical: 3,
			deadline: time.Second, length: 20 * time.Second, seed: 1}, 20},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o := tt.o
			p := resilience.Policy{ConcurrencyLimit: o.capacity, ConcurrencyQueueLimit: tt.queue,
				Priority: pipeline.PriorityCritical, PriorityReserve: resilience.DefaultPriorityReserve}
			r := o.run(t, p)
			capacity := int(o.length / o.service * time.Duration(o.capacity)) // calls the backend can serve in the run
			good := r.critical.ok + r.sheddable.ok
			lost := r.critical.sent + r.sheddable.sent - good
			t.Logf("critical %d/%d, sheddable %d/%d succeeded; goodput %d of capacity %d; most at once %d",
				r.critical.ok, r.critical.sent, r.sheddable.ok, r.sheddable.sent, good, capacity, r.maxInFlight)
			if r.critical.sent == 0 || r.critical.ok*100 < r.critical.sent*99 {
				t.Errorf("critical calls: %d of %d succeeded, want ≥ 99 %%", r.critical.ok, r.critical.sent)
			}
			if shed := r.sheddable.sent - r.sheddable.ok; lost == 0 || shed*100 < lost*99 {
				t.Errorf("sheddable calls took %d of the %d failures, want ≥ 99 %%", shed, lost)
			}
			if good*10 < capacity*9 {
				t.Errorf("goodput %d, want ≥ 90 %% of capacity %d", good, capacity)
			}
			if r.maxInFlight > p.ConcurrencyLimit {
				t.Errorf("%d calls ran at once, more than the limit %d", r.maxInFlight, p.ConcurrencyLimit)
			}

			// The control: the same run with every call at the operation's class.
			p.Priority = pipeline.PriorityDefault
			o.classless = true
			rf := o.run(t, p)
			t.Logf("without classes: critical %d/%d succeeded", rf.critical.ok, rf.critical.sent)
			if rf.critical.ok*100 >= rf.critical.sent*99 {
				t.Errorf("without classes critical calls succeeded %d of %d: the test cannot tell classes from luck", rf.critical.ok, rf.critical.sent)
			}
		})
	}
}

// TestReserveCoversALimitSetTooHigh: with a concurrency limit 20 % above
// what the backend serves at once (as an adaptive limit may settle),
// lowered calls could fill the backend and critical calls would wait
// behind them inside it; a reserve of 0.2, the default, keeps them out.
// With 0.1 the same run loses critical calls, which is why the default
// is 0.2.
func TestReserveCoversALimitSetTooHigh(t *testing.T) {
	o := prioOverload{capacity: 50, service: 200 * time.Millisecond, factor: 3, critical: 3,
		deadline: time.Second, length: 20 * time.Second, seed: 1}
	for _, tt := range []struct {
		reserve float64
		enough  bool
	}{{resilience.DefaultPriorityReserve, true}, {0.1, false}} {
		p := resilience.Policy{ConcurrencyLimit: o.capacity * 6 / 5, ConcurrencyQueueLimit: 20,
			Priority: pipeline.PriorityCritical, PriorityReserve: tt.reserve}
		r := o.run(t, p)
		t.Logf("reserve %v: critical %d/%d, sheddable %d/%d succeeded", tt.reserve, r.critical.ok, r.critical.sent, r.sheddable.ok, r.sheddable.sent)
		if got := r.critical.ok*100 >= r.critical.sent*99; got != tt.enough {
			t.Errorf("reserve %v: critical calls %d of %d succeeded; want ≥ 99 %% %v", tt.reserve, r.critical.ok, r.critical.sent, tt.enough)
		}
	}
}
