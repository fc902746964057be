// Package overload is a deterministic overload simulator: a backend of a
// fixed capacity, and a stream of calls that an operation's real limits —
// a resilience.Limits, which runs the deadline middleware, as the
// kernel runs them — admit to it, each with its deadline.
//
// The backend has Workers workers; a call holds one for the service time,
// and calls beyond the workers wait for one, first come first served. Its
// capacity C is Workers/Service calls per second, and C·S = Workers is the
// concurrency it serves without queueing: the knee an adaptive limit must
// find. Arrivals are a Poisson stream of a chosen rate from a seeded
// generator; Scenario.Jitter spreads their service times about S.
//
// Run a Scenario inside a testing/synctest bubble: the clock is then the
// bubble's, every timer fires at its exact instant and a run of minutes
// takes a moment. An arrival carries a class (Arrival.Class), which
// Scenario.Spec may turn into what the invocation carries (a priority):
// Result reports goodput by class.
package overload

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience"
)

// Backend is the protected work: Workers calls at once, each for the
// service time (times the call's Arrival.Work); the others wait for a
// worker in arrival order. A call whose context ends gives its worker (or
// its place) back at once.
type Backend struct {
	workers chan struct{}
	service atomic.Int64
}

// NewBackend returns a backend of workers workers and the service time s.
func NewBackend(workers int, s time.Duration) *Backend {
	b := &Backend{workers: make(chan struct{}, workers)}
	b.service.Store(int64(s))
	return b
}

// SetService changes the service time of the calls that start from now
// on (a slowdown, a recovery).
func (b *Backend) SetService(s time.Duration) { b.service.Store(int64(s)) }

// Serve serves one call: it waits for a worker, holds it for the service
// time times work (1 when work is 0), and returns nil, or ctx's error
// when ctx ends first.
func (b *Backend) Serve(ctx context.Context, work float64) error {
	select {
	case b.workers <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-b.workers }()
	if work <= 0 {
		work = 1
	}
	t := time.NewTimer(time.Duration(work * float64(b.service.Load())))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Arrival is one call of a scenario.
type Arrival struct {
	// Index is the call's rank; At is when it arrives (since the start).
	Index int
	At    time.Duration
	// Class is the call's class ("" unless Scenario.Shape sets one).
	Class string
	// Deadline is the call's deadline, after At: the operation's own
	// (pipeline.DeadlineOperation), or the caller's when CallerDeadline.
	Deadline       time.Duration
	CallerDeadline bool
	// CancelAfter, when positive, is when the caller cancels, after At.
	CancelAfter time.Duration
	// Work is the call's service time in multiples of the backend's
	// (0: 1), drawn when Scenario.Jitter is set.
	Work float64
	// Skip, set by Scenario.Shape, drops the arrival: the call is not
	// made (a rate that falls).
	Skip bool
}

// Event is a change of the scenario at a time since the start.
type Event struct {
	At time.Duration
	Do func()
}

// Scenario is one run.
type Scenario struct {
	// Limits are the operation's limits under test.
	Limits  *resilience.Limits
	Backend *Backend
	// Rate is the arrivals per second; Duration how long they arrive.
	Rate     float64
	Duration time.Duration
	// Ramp, when positive, raises the rate from 0 to Rate over its first
	// Ramp (traffic that grows, as over a morning).
	Ramp time.Duration
	// Seed seeds the arrivals (and Shape's generator).
	Seed uint64
	// Jitter, when positive, spreads the service times: each call's is
	// uniform within ±Jitter of the backend's (Arrival.Work), drawn from
	// the seeded generator.
	Jitter float64
	// Deadline is every call's deadline (Arrival.Deadline), the
	// operation's own unless CallerDeadline.
	Deadline       time.Duration
	CallerDeadline bool
	// Shape, when set, changes each arrival before it is made: a class, a
	// cancellation, another deadline.
	Shape func(a *Arrival, r *rand.Rand)
	// Spec, when set, completes each invocation from its arrival (for
	// instance, baggage carrying the call's priority).
	Spec func(a Arrival, s *pipeline.Spec)
	// Events run at their times.
	Events []Event
	// Every is the period of Result.Trace (default 100ms).
	Every time.Duration
}

// Call is how one call went.
type Call struct {
	Arrival
	// Admitted: the call reached the backend (its limits let it in).
	Admitted bool
	// Err is its outcome (nil: success); Latency, from its arrival to its
	// answer.
	Err     error
	Latency time.Duration
}

// Good reports whether the call succeeded before its deadline.
func (c Call) Good() bool { return c.Err == nil && c.Latency <= c.Deadline }

// Point is the state of the limits at one time of the run.
type Point struct {
	At time.Duration
	// Limit is the concurrency limit enforced; Adaptive the controller's.
	Limit, Adaptive, InFlight, Queue int
}

// Result is what a run did.
type Result struct {
	Calls []Call  // by arrival
	Trace []Point // every Scenario.Every
}

type op string

func (o op) OperationID() string { return string(o) }

// Run runs s to its end: arrivals for s.Duration, then until every call
// has ended. Run it inside a synctest bubble.
func Run(s Scenario) Result {
	every := s.Every
	if every <= 0 {
		every = 100 * time.Millisecond
	}
	rng := rand.New(rand.NewPCG(s.Seed, s.Seed^0x9e3779b97f4a7c15))
	mw := s.Limits
	start := time.Now()
	var (
		mu    sync.Mutex
		res   Result
		calls sync.WaitGroup
	)
	done := make(chan struct{})
	var bg sync.WaitGroup
	bg.Go(func() { // the trace
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			st := s.Limits.State()
			p := Point{At: time.Since(start), Limit: st.ConcurrencyLimit, Adaptive: st.AdaptiveLimit, InFlight: st.InFlight, Queue: st.ConcurrencyQueue}
			mu.Lock()
			res.Trace = append(res.Trace, p)
			mu.Unlock()
			select {
			case <-t.C:
			case <-done:
				return
			}
		}
	})
	for _, e := range s.Events {
		bg.Go(func() {
			select {
			case <-time.After(e.At):
				e.Do()
			case <-done:
			}
		})
	}
	id := op(s.Limits.ID())
	var at time.Duration
	for i := 0; ; i++ {
		at += time.Duration(rng.ExpFloat64() / s.Rate * float64(time.Second))
		if at >= s.Duration {
			break
		}
		if at < s.Ramp && rng.Float64() >= float64(at)/float64(s.Ramp) {
			continue // thinning: the rate at at is Rate·at/Ramp
		}
		a := Arrival{Index: i, At: at, Deadline: s.Deadline, CallerDeadline: s.CallerDeadline}
		if s.Jitter > 0 {
			a.Work = 1 + s.Jitter*(2*rng.Float64()-1)
		}
		if s.Shape != nil {
			if s.Shape(&a, rng); a.Skip {
				continue
			}
		}
		time.Sleep(time.Until(start.Add(at)))
		calls.Go(func() {
			c := call(mw, id, s, a)
			mu.Lock()
			res.Calls = append(res.Calls, c)
			mu.Unlock()
		})
	}
	calls.Wait()
	close(done)
	bg.Wait()
	slices.SortFunc(res.Calls, func(a, b Call) int { return a.Index - b.Index })
	return res
}

// call makes one call of s.
func call(mw *resilience.Limits, id op, s Scenario, a Arrival) Call {
	now := time.Now()
	spec := pipeline.Spec{Operation: id, Arrival: now, Deadline: now.Add(a.Deadline), DeadlineSource: pipeline.DeadlineOperation}
	ctx := context.Background()
	if a.CallerDeadline {
		spec.CallerDeadline, spec.DeadlineSource = spec.Deadline, pipeline.DeadlineCaller
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, spec.Deadline)
		defer cancel()
	}
	if a.CancelAfter > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer time.AfterFunc(a.CancelAfter, cancel).Stop()
		defer cancel()
	}
	if s.Spec != nil {
		s.Spec(a, &spec)
	}
	c := Call{Arrival: a}
	_, c.Err = mw.Invoke(ctx, pipeline.NewInvocation(spec), func(ctx context.Context, _ *pipeline.Invocation) (any, error) {
		c.Admitted = true
		return nil, s.Backend.Serve(ctx, a.Work)
	})
	c.Latency = time.Since(now)
	return c
}

// Goodput returns the calls per second that succeeded before their
// deadline among those that arrived in [from, to), and only those of
// class when class is not "*".
func (r Result) Goodput(from, to time.Duration, class string) float64 {
	n := 0
	for _, c := range r.Calls {
		if c.At >= from && c.At < to && (class == "*" || c.Class == class) && c.Good() {
			n++
		}
	}
	return float64(n) / (to - from).Seconds()
}

// AdmittedLatency returns the q-quantile (0 < q ≤ 1) of the latency of
// the calls admitted among those that arrived in [from, to).
func (r Result) AdmittedLatency(from, to time.Duration, q float64) time.Duration {
	var l []time.Duration
	for _, c := range r.Calls {
		if c.At >= from && c.At < to && c.Admitted {
			l = append(l, c.Latency)
		}
	}
	if len(l) == 0 {
		return 0
	}
	slices.Sort(l)
	return l[min(max(int(math.Ceil(q*float64(len(l)))), 1), len(l))-1]
}

// Limits returns the adaptive limits of the trace in [from, to).
func (r Result) Limits(from, to time.Duration) []int {
	var out []int
	for _, p := range r.Trace {
		if p.At >= from && p.At < to {
			out = append(out, p.Adaptive)
		}
	}
	return out
}
