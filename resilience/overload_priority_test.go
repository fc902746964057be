package resilience_test

import (
	"context"
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
	capacity int           // C: calls the backend serves at once
	service  time.Duration // S: time it takes to serve one
	factor   int           // arrivals per second, as a multiple of C/S
	critical int           // of every 10 arrivals, how many are critical (the rest sheddable)
	deadline time.Duration // each call's deadline, from its arrival
	length   time.Duration // how long calls arrive
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
	// maxInFlight is the most calls the backend served at once.
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
			mu.Lock()
			running++
			res.maxInFlight = max(res.maxInFlight, running)
			mu.Unlock()
			defer func() { mu.Lock(); running--; mu.Unlock() }()
			tm := time.NewTimer(o.service)
			defer tm.Stop()
			select {
			case <-tm.C:
				return "done", nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		h, _ := limitStack(t, p, backend)
		every := o.service / time.Duration(o.factor*o.capacity)
		var wg sync.WaitGroup
		start := time.Now()
		for i := 0; time.Since(start) < o.length; i++ {
			class := pipeline.PrioritySheddable
			if i%10 < o.critical {
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
			time.Sleep(every)
		}
		wg.Wait()
	})
	return res
}

// TestOverloadShedsSheddableFirst: at 3× overload with 30 % critical
// traffic, critical calls succeed ≥ 99 % while sheddable calls absorb the
// loss: they take ≥ 99 % of the failures, and the backend is kept busy
// (goodput ≥ 90 % of its capacity). The same traffic without classes
// (every call default) loses critical calls like the rest: the classes,
// not luck, save them.
func TestOverloadShedsSheddableFirst(t *testing.T) {
	o := prioOverload{capacity: 10, service: 100 * time.Millisecond, factor: 3, critical: 3,
		deadline: time.Second, length: 10 * time.Second}
	p := resilience.Policy{ConcurrencyLimit: o.capacity, ConcurrencyQueueLimit: o.capacity,
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
	if r.maxInFlight > o.capacity {
		t.Errorf("the backend served %d calls at once, more than the limit %d", r.maxInFlight, o.capacity)
	}

	// The control: the same run with every call at the operation's class.
	p.Priority = pipeline.PriorityDefault
	o.classless = true
	rf := o.run(t, p)
	t.Logf("without classes: critical %d/%d succeeded", rf.critical.ok, rf.critical.sent)
	if rf.critical.ok*100 >= rf.critical.sent*99 {
		t.Errorf("without classes critical calls succeeded %d of %d: the test cannot tell classes from luck", rf.critical.ok, rf.critical.sent)
	}
}
