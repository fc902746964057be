package main

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// serveAll starts one call per demand at once (the i-th with the context
// ctxs[i], or context.Background()) and returns when each ended and how.
func serveAll(b *backend, demands []time.Duration, ctxs ...context.Context) ([]time.Duration, []error) {
	start := time.Now()
	took := make([]time.Duration, len(demands))
	errs := make([]error, len(demands))
	var wg sync.WaitGroup
	for i, d := range demands {
		ctx := context.Background()
		if i < len(ctxs) {
			ctx = ctxs[i]
		}
		wg.Go(func() {
			errs[i] = b.serve(ctx, d)
			took[i] = time.Since(start)
		})
	}
	wg.Wait()
	return took, errs
}

func near(got, want time.Duration) bool { return (got - want).Abs() < time.Microsecond }

// TestBackendProcessorSharing checks the backend's model: up to c calls
// run at their service time, beyond c all slow alike, a slowdown divides
// the speed, and a call whose context ends leaves its share to the others.
func TestBackendProcessorSharing(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	cases := []struct {
		name    string
		c       int
		slow    float64
		demands []time.Duration
		cancel  time.Duration // the first call's deadline (0: none)
		want    []time.Duration
	}{
		{"at capacity", 2, 1, []time.Duration{ms(100), ms(100)}, 0, []time.Duration{ms(100), ms(100)}},
		{"twice the capacity", 2, 1, []time.Duration{ms(100), ms(100), ms(100), ms(100)}, 0,
			[]time.Duration{ms(200), ms(200), ms(200), ms(200)}},
		{"shorter leaves first", 1, 1, []time.Duration{ms(100), ms(300)}, 0, []time.Duration{ms(200), ms(400)}},
		{"slowed five times", 2, 5, []time.Duration{ms(100)}, 0, []time.Duration{ms(500)}},
		// By 150 ms each of three has had 50 ms; the two left then share
		// one worker for their 250 ms each.
		{"a cancelled call gives its share back", 1, 1, []time.Duration{ms(300), ms(300), ms(300)}, ms(150),
			[]time.Duration{ms(150), ms(650), ms(650)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := newBackend(tc.c, false)
				defer b.close()
				b.setSlowdown(tc.slow)
				var ctxs []context.Context
				if tc.cancel > 0 {
					ctx, cancel := context.WithTimeout(context.Background(), tc.cancel)
					defer cancel()
					ctxs = append(ctxs, ctx)
				}
				took, errs := serveAll(b, tc.demands, ctxs...)
				for i := range tc.want {
					wantErr := error(nil)
					if i == 0 && tc.cancel > 0 {
						wantErr = context.DeadlineExceeded
					}
					if !near(took[i], tc.want[i]) || !errors.Is(errs[i], wantErr) {
						t.Errorf("call %d ended after %v with %v, want %v with %v", i, took[i], errs[i], tc.want[i], wantErr)
					}
				}
			})
		})
	}
}

// TestMeasure checks the figures of a phase: goodput by the time of the
// answer, the rest by the time of the arrival.
func TestMeasure(t *testing.T) {
	s := time.Second
	records := []record{
		{at: 0, latency: s / 2, admitted: true, ok: true},      // before the phase
		{at: s / 2, latency: s, admitted: true, ok: true},      // arrived before, answered within: goodput only
		{at: s, latency: s / 2, admitted: true, ok: true},      // good
		{at: s, latency: 3 * s, admitted: true, ok: true},      // too late
		{at: 2 * s, latency: 2 * s, admitted: true, ok: false}, // timed out
		{at: 2 * s, latency: 0, admitted: false, ok: false},    // rejected
		{at: 2 * s, latency: s / 10, admitted: true, ok: true}, // good
		{at: 3 * s, latency: s / 10, admitted: true, ok: true}, // after the phase
	}
	r := measure(phase{from: s, to: 3 * s}, records, 2*s)
	if r.offered != 2.5 || r.goodput != 1.5 || r.admitted != 0.8 || r.timedOut != 2 || r.p99 != 3*s {
		t.Errorf("measure = offered %v, goodput %v, admitted %v, timed out %d, p99 %v; want 2.5, 1.5, 0.8, 2, 3s",
			r.offered, r.goodput, r.admitted, r.timedOut, r.p99)
	}
}
