// Command overload runs Sundial's adaptive concurrency limit side by side
// with a guessed static limit and three peers — failsafe-go's
// adaptivelimiter, kratos' BBR (go-kratos/aegis) and go-zero's
// AdaptiveShedder — each in front of the same simulated backend, at 1×, 2×
// and 4× its capacity and through a 5× slowdown, and prints goodput (calls
// answered successfully before their deadline, per second) and the p99 of
// the admitted calls. It is a module of its own, so that users of the
// framework never download the peers. Run it with make bench-overload.
//
// The backend has 20 workers and a 100 ms service time (capacity 200
// calls/s, C·S = 20); calls beyond the workers wait for one. Every call
// has a 1 s deadline of its own. It runs in real time on 127.0.0.1-free
// in-process calls, bounded: about 3 minutes in all.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/failsafe-go/failsafe-go/adaptivelimiter"
	"github.com/go-kratos/aegis/ratelimit"
	"github.com/go-kratos/aegis/ratelimit/bbr"
	"github.com/zeromicro/go-zero/core/load"
	"github.com/zeromicro/go-zero/core/logx"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience"
)

const (
	workers  = 20
	service  = 100 * time.Millisecond
	capacity = float64(workers) / 0.1
	deadline = time.Second
)

// backend is the protected work: workers at once, the rest wait. (It
// repeats resilience/internal/overload.Backend, which a module outside the
// framework cannot import.)
type backend struct {
	slots   chan struct{}
	service atomic.Int64
}

func newBackend() *backend {
	b := &backend{slots: make(chan struct{}, workers)}
	b.service.Store(int64(service))
	return b
}

func (b *backend) serve(ctx context.Context) error {
	select {
	case b.slots <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-b.slots }()
	t := time.NewTimer(time.Duration(b.service.Load()))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// guard is one limiter in front of the backend: call runs work if the
// limiter admits it, and reports whether it did.
type guard interface {
	call(ctx context.Context, work func(context.Context) error) (admitted bool, err error)
}

type op string

func (o op) OperationID() string { return string(o) }

// sundial runs the real Limits inside a DeadlineMiddleware.
type sundial struct {
	mw *resilience.DeadlineMiddleware
}

func newSundial(p resilience.Policy) guard {
	return sundial{resilience.NewDeadlineMiddleware(resilience.WithLimits(resilience.NewLimits("bench.op", p)))}
}

func (s sundial) call(ctx context.Context, work func(context.Context) error) (bool, error) {
	now := time.Now()
	inv := pipeline.NewInvocation(pipeline.Spec{Operation: op("bench.op"), Arrival: now,
		Deadline: now.Add(deadline), DeadlineSource: pipeline.DeadlineOperation})
	admitted := false
	_, err := s.mw.Invoke(ctx, inv, func(ctx context.Context, _ *pipeline.Invocation) (any, error) {
		admitted = true
		return nil, work(ctx)
	})
	return admitted, err
}

// failsafe is failsafe-go's adaptivelimiter with its defaults.
type failsafe struct {
	l adaptivelimiter.AdaptiveLimiter[any]
}

func (f failsafe) call(ctx context.Context, work func(context.Context) error) (bool, error) {
	p, ok := f.l.TryAcquirePermit()
	if !ok {
		return false, errors.New("rejected")
	}
	ctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	err := work(ctx)
	if err != nil {
		p.Drop()
	} else {
		p.Record()
	}
	return true, err
}

// kratos is BBR with its defaults.
type kratos struct{ l *bbr.BBR }

func (k kratos) call(ctx context.Context, work func(context.Context) error) (bool, error) {
	done, err := k.l.Allow()
	if err != nil {
		return false, err
	}
	ctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	err = work(ctx)
	done(ratelimit.DoneInfo{Err: err})
	return true, err
}

// gozero is go-zero's AdaptiveShedder with its defaults.
type gozero struct{ s load.Shedder }

func (g gozero) call(ctx context.Context, work func(context.Context) error) (bool, error) {
	p, err := g.s.Allow()
	if err != nil {
		return false, err
	}
	ctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	if err = work(ctx); err != nil {
		p.Fail()
	} else {
		p.Pass()
	}
	return true, err
}

// scenario is one load: rate × capacity for length, with the backend
// slowed 5× during [slowFrom, slowTo) when slowTo > 0; what arrives in
// the first warm of it is not counted.
type scenario struct {
	name             string
	rate             float64
	length, warm     time.Duration
	slowFrom, slowTo time.Duration
}

type result struct {
	goodput float64
	p99     time.Duration
}

// run runs s against g.
func run(s scenario, g guard, seed uint64) result {
	b := newBackend()
	rng := rand.New(rand.NewPCG(seed, seed))
	var (
		mu       sync.Mutex
		good     int
		admitted []time.Duration
		wg       sync.WaitGroup
	)
	start := time.Now()
	if s.slowTo > 0 {
		t1 := time.AfterFunc(s.slowFrom, func() { b.service.Store(int64(5 * service)) })
		t2 := time.AfterFunc(s.slowTo, func() { b.service.Store(int64(service)) })
		defer t1.Stop()
		defer t2.Stop()
	}
	var at time.Duration
	for {
		at += time.Duration(rng.ExpFloat64() / (s.rate * capacity) * float64(time.Second))
		if at >= s.length {
			break
		}
		time.Sleep(time.Until(start.Add(at)))
		counted := at >= s.warm
		wg.Go(func() {
			t0 := time.Now()
			ok, err := g.call(context.Background(), b.serve)
			d := time.Since(t0)
			if !counted {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if ok {
				admitted = append(admitted, d)
			}
			if ok && err == nil && d <= deadline {
				good++
			}
		})
	}
	wg.Wait()
	slices.Sort(admitted)
	r := result{goodput: float64(good) / (s.length - s.warm).Seconds()}
	if n := len(admitted); n > 0 {
		r.p99 = admitted[min((n*99+99)/100, n)-1]
	}
	return r
}

func main() {
	scale := flag.Float64("scale", 1, "multiplies every scenario's length (the test runs a short one)")
	flag.Parse()
	table(os.Stdout, *scale)
}

// table runs every scenario against every limiter, each scenario's
// length multiplied by scale, and writes the results as a Markdown table.
func table(w io.Writer, scale float64) {
	logx.Disable() // go-zero logs every shed call
	sec := func(f float64) time.Duration { return time.Duration(f * scale * float64(time.Second)) }
	scenarios := []scenario{
		{name: "1x", rate: 1, length: sec(8), warm: sec(3)},
		{name: "2x", rate: 2, length: sec(8), warm: sec(3)},
		{name: "4x", rate: 4, length: sec(8), warm: sec(3)},
		{name: "2x, 5x slowdown", rate: 2, length: sec(14), warm: sec(3), slowFrom: sec(5), slowTo: sec(10)},
	}
	guards := []struct {
		name string
		make func() guard
	}{
		{"sundial adaptive", func() guard { return newSundial(resilience.Policy{ConcurrencyLimit: resilience.AdaptiveLimit}) }},
		{"sundial static 100", func() guard { return newSundial(resilience.Policy{ConcurrencyLimit: 100}) }},
		{"failsafe-go adaptivelimiter", func() guard { return failsafe{adaptivelimiter.NewBuilder[any]().Build()} }},
		{"kratos BBR", func() guard { return kratos{bbr.NewLimiter()} }},
		{"go-zero AdaptiveShedder", func() guard { return gozero{load.NewAdaptiveShedder()} }},
	}
	fmt.Fprintf(w, "backend: %d workers, %v per call (capacity %.0f calls/s), deadline %v\n\n", workers, service, capacity, deadline)
	fmt.Fprintln(w, "| scenario | limiter | goodput (calls/s) | of capacity | p99 of admitted |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|")
	for i, s := range scenarios {
		for _, g := range guards {
			r := run(s, g.make(), uint64(i+1))
			fmt.Fprintf(w, "| %s | %s | %.0f | %.0f %% | %v |\n", s.name, g.name, r.goodput, 100*r.goodput/capacity, r.p99.Round(time.Millisecond))
		}
	}
}
