package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/adaptivelimiter"
	"github.com/go-kratos/aegis/ratelimit"
	"github.com/go-kratos/aegis/ratelimit/bbr"
	"github.com/zeromicro/go-zero/core/load"
	"github.com/zeromicro/go-zero/core/stat"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
)

// serveFunc is one call's work: the backend, under the context the guard
// gives it.
type serveFunc func(ctx context.Context) error

// guard is one contender: it takes a call through its limit to the
// backend. do returns nil for a success; every call has the deadline d
// from its arrival.
type guard interface {
	do(arrival time.Time, d time.Duration, serve serveFunc) error
	// cpu is the CPU usage the guard reads, in per mille, or -1 when it
	// reads none.
	cpu() int64
	// limit is the concurrency the guard allows now, or -1 when it has
	// none (go-zero's shedder keeps its bound to itself).
	limit() int
	close()
}

// contender names a guard and builds a fresh one for each run.
type contender struct {
	name string
	// options says which options the run sets and why.
	options string
	// cpuBased: the guard sheds on the machine's CPU usage, so the backend
	// burns CPU in its runs (see backend.burn).
	cpuBased bool
	build    func(deadline time.Duration) (guard, error)
}

// contenders are the five guards compared, in the order printed.
func contenders(static int) []contender {
	return []contender{
		{"sundial adaptive", `"ConcurrencyLimit": "adaptive", "Adaptive": {} (defaults), TimeoutSeconds = deadline`, false,
			func(d time.Duration) (guard, error) { return newSundial(`"adaptive", "Adaptive": {}`, d) }},
		{fmt.Sprintf("sundial static %d", static), fmt.Sprintf(`"ConcurrencyLimit": %d (a guess), TimeoutSeconds = deadline`, static), false,
			func(d time.Duration) (guard, error) { return newSundial(fmt.Sprint(static), d) }},
		{"failsafe-go adaptivelimiter", "NewBuilder().Build(): defaults (limits 1/200/20, no queueing)", false,
			func(time.Duration) (guard, error) {
				l := adaptivelimiter.NewBuilder[any]().Build()
				return failsafeGuard{l, failsafe.With[any](l)}, nil
			}},
		{"kratos BBR", "bbr.NewLimiter(): defaults (CPU threshold 800‰, 10 s window)", true,
			func(time.Duration) (guard, error) { return bbrGuard{bbr.NewLimiter()}, nil }},
		{"go-zero AdaptiveShedder", "load.NewAdaptiveShedder(): defaults (CPU threshold 900‰, 5 s window); logs off", true,
			func(time.Duration) (guard, error) { return zeroGuard{load.NewAdaptiveShedder()}, nil }},
	}
}

// sundialGuard calls an operation of a real kernel in process: the
// operation's own TimeoutSeconds is the call's deadline, so a call that
// runs out of time is the operation's timeout, a sample for the adaptive
// controller, as it is in a service whose operations set their timeouts.
type sundialGuard struct {
	k  *kernel.Kernel
	op *kernel.Op // the operation's handle, taken once
}

// work is the operation's input: the call's work, not JSON (the kernel is
// called in process with the decoded input).
type work struct{ serve serveFunc }

const opID = "backend.serve"

func newSundial(limit string, d time.Duration) (guard, error) {
	reg := operations.NewRegistry()
	err := operations.Register(reg, operations.Descriptor{ID: opID}, func(ctx context.Context, in *work) (struct{}, error) {
		return struct{}{}, in.serve(ctx)
	})
	if err != nil {
		return nil, err
	}
	cfg := fmt.Sprintf(`{"Sundial":{"Kernel":{"Resilience":{"Operations":{%q:{"ConcurrencyLimit":%s,"TimeoutSeconds":%g}}}}}}`,
		opID, limit, d.Seconds())
	k, err := kernel.New(kernel.WithRegistry(reg), kernel.WithConfigJSON([]byte(cfg)),
		kernel.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		return nil, err
	}
	return sundialGuard{k, k.Operations()[0]}, nil
}

func (g sundialGuard) do(arrival time.Time, _ time.Duration, serve serveFunc) error {
	return g.op.Invoke(context.Background(), kernel.Unary{Caller: kernel.Caller{Arrival: arrival}, Input: &work{serve}}).Err
}

func (g sundialGuard) limit() int {
	for _, o := range g.k.Status().Operations {
		if o.ID == opID {
			return o.ConcurrencyLimit
		}
	}
	return -1
}

func (g failsafeGuard) limit() int { return g.l.Limit() }
func (g bbrGuard) limit() int      { return int(g.l.Stat().MaxInFlight) }
func (zeroGuard) limit() int       { return -1 }

func (sundialGuard) cpu() int64  { return -1 }
func (g sundialGuard) close()    { g.k.Close() }
func (failsafeGuard) cpu() int64 { return -1 }
func (failsafeGuard) close()     {}
func (g bbrGuard) cpu() int64    { return g.l.Stat().CPU }
func (bbrGuard) close()          {}
func (zeroGuard) cpu() int64     { return stat.CpuUsage() }
func (zeroGuard) close()         {}

// failsafeGuard runs the call through a failsafe-go executor holding the
// adaptive limiter, as its docs show (failsafe.With(limiter).Run).
type failsafeGuard struct {
	l  adaptivelimiter.AdaptiveLimiter[any]
	ex failsafe.Executor[any]
}

func (g failsafeGuard) do(arrival time.Time, d time.Duration, serve serveFunc) error {
	ctx, cancel := context.WithDeadline(context.Background(), arrival.Add(d))
	defer cancel()
	return g.ex.WithContext(ctx).Run(func() error { return serve(ctx) })
}

// bbrGuard is kratos's BBR limiter: Allow, then done with the outcome.
type bbrGuard struct{ l *bbr.BBR }

func (g bbrGuard) do(arrival time.Time, d time.Duration, serve serveFunc) error {
	done, err := g.l.Allow()
	if err != nil {
		return err
	}
	err = serveBy(arrival.Add(d), serve)
	done(ratelimit.DoneInfo{Err: err})
	return err
}

// serveBy serves a call under a context that ends at deadline.
func serveBy(deadline time.Time, serve serveFunc) error {
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	return serve(ctx)
}

// zeroGuard is go-zero's shedder: Allow, then Pass on success and Fail
// on an error, as go-zero's own shedding handler does for a 5xx.
type zeroGuard struct{ s load.Shedder }

func (g zeroGuard) do(arrival time.Time, d time.Duration, serve serveFunc) error {
	p, err := g.s.Allow()
	if err != nil {
		return err
	}
	if err = serveBy(arrival.Add(d), serve); err != nil {
		p.Fail()
		return err
	}
	p.Pass()
	return nil
}
