package outbound_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
	"github.com/sundial-go/sundial/resilience/deadline"
	"github.com/sundial-go/sundial/resilience/outbound"
)

const ms = time.Millisecond

// TestBudgetReferenceNumbers mirrors the reference: a 2.0 s deadline, a
// 0.2 s safety margin and 0.5 s reserved for the next step give the first
// call at most 1.3 s; when it takes 1.0 s, the next call gets 0.8 s. The
// budget is built inside a handler, from the context the deadline middleware
// gives it.
func TestBudgetReferenceNumbers(t *testing.T) {
	for _, tc := range []struct {
		name     string
		deadline time.Duration
		opts     []outbound.BudgetOption
	}{
		{"from the invocation deadline", 2 * time.Second, nil},
		{"WithTotal under a later deadline", 10 * time.Second, []outbound.BudgetOption{outbound.WithTotal(2 * time.Second)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				inv := pipeline.NewInvocation(pipeline.Spec{Deadline: start.Add(tc.deadline)})
				_, err := deadline.Middleware().Invoke(t.Context(), inv, func(ctx context.Context, _ *pipeline.Invocation) (any, error) {
					opts := append([]outbound.BudgetOption{outbound.WithMargin(200 * ms)}, tc.opts...)
					b, err := outbound.NewBudget(ctx, "orders.submit", opts...)
					if err != nil {
						return nil, err
					}
					ictx, cancel, err := b.Context(ctx, outbound.Call{Dependency: "inventory", Reserve: 500 * ms, Cap: 5 * time.Second})
					if err != nil {
						return nil, err
					}
					if d, _ := ictx.Deadline(); d.Sub(start) != 1300*ms {
						t.Errorf("inventory deadline = start+%v, want start+1.3s", d.Sub(start))
					}
					time.Sleep(time.Second) // inventory answers after 1.0 s
					cancel()
					got, err := b.Timeout(outbound.Call{Dependency: "billing", Cap: 5 * time.Second})
					if err != nil || got != 800*ms {
						t.Errorf("Timeout(billing) after 1.0 s = %v, %v; want 800ms", got, err)
					}
					return nil, nil
				})
				if err != nil {
					t.Errorf("Invoke = %v, want nil", err)
				}
			})
		})
	}
}

// TestBudgetFirstCallCutAtItsAllotment: a slow first call is cut at 1.3 s
// with a cause that names the dependency and still is a deadline for
// http.Client and grpc-go.
func TestBudgetFirstCallCutAtItsAllotment(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		b, err := outbound.NewBudget(ctx, "orders.submit", outbound.WithMargin(200*ms))
		if err != nil {
			t.Fatal(err)
		}
		ictx, icancel, err := b.Context(ctx, outbound.Call{Dependency: "inventory", Reserve: 500 * ms})
		if err != nil {
			t.Fatal(err)
		}
		defer icancel()
		<-ictx.Done() // inventory never answers
		if el := time.Since(start); el != 1300*ms {
			t.Errorf("inventory call cut after %v, want 1.3s", el)
		}
		cause := context.Cause(ictx)
		if !errors.Is(cause, context.DeadlineExceeded) || ictx.Err() != context.DeadlineExceeded {
			t.Errorf("Err, Cause = %v, %v; want DeadlineExceeded and a cause wrapping it", ictx.Err(), cause)
		}
		e := pipeline.AsError(cause)
		if e.Kind() != pipeline.KindTimeout || e.Code() != outbound.CodeBudgetExhausted {
			t.Fatalf("cause = %v, want TIMEOUT %s", cause, outbound.CodeBudgetExhausted)
		}
		want := map[string]any{"stage": "orders.submit", "dependency": "inventory", "remainingMs": int64(2000), "allottedMs": int64(1300), "cut": true}
		for k, v := range want {
			if e.Details()[k] != v {
				t.Errorf("details[%q] = %v, want %v", k, e.Details()[k], v)
			}
		}
		// Bounded by the caller's 2 s deadline, not by a cap: the cut is the
		// caller's deadline, not a failure for the breaker.
		if !deadline.IsOwnCancellation(ctx, cause) {
			t.Error("IsOwnCancellation(live ctx, deadline-bound cut) = false, want true")
		}
	})
}

func TestBudgetAllotments(t *testing.T) {
	start := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	ctx, cancel := context.WithDeadline(context.Background(), start.Add(2*time.Second))
	defer cancel()
	for _, tc := range []struct {
		name  string
		opts  []outbound.BudgetOption
		at    time.Duration
		call  outbound.Call
		want  time.Duration
		owned bool // an exhausted error, and is it the caller's deadline?
	}{
		{"everything after the margin", []outbound.BudgetOption{outbound.WithMargin(200 * ms)}, 0, outbound.Call{}, 1800 * ms, false},
		{"reserve for the next step", []outbound.BudgetOption{outbound.WithMargin(200 * ms)}, 0, outbound.Call{Reserve: 500 * ms}, 1300 * ms, false},
		{"next step after 1 s", []outbound.BudgetOption{outbound.WithMargin(200 * ms)}, time.Second, outbound.Call{}, 800 * ms, false},
		{"share of parallel calls", []outbound.BudgetOption{outbound.WithMargin(200 * ms)}, 0, outbound.Call{Share: 0.5}, 900 * ms, false},
		{"share after the reserve", []outbound.BudgetOption{outbound.WithMargin(200 * ms)}, 0, outbound.Call{Reserve: 300 * ms, Share: 0.6}, 900 * ms, false},
		{"call cap", nil, 0, outbound.Call{Cap: 300 * ms}, 300 * ms, false},
		{"budget call cap", []outbound.BudgetOption{outbound.WithCallCap(400 * ms)}, 0, outbound.Call{}, 400 * ms, false},
		{"call cap overrides budget cap", []outbound.BudgetOption{outbound.WithCallCap(400 * ms)}, 0, outbound.Call{Cap: time.Second}, time.Second, false},
		{"cap above what remains", nil, 1900 * ms, outbound.Call{Cap: time.Second}, 100 * ms, false},
		{"tiny remainder, minimum 0", nil, 1999 * ms, outbound.Call{}, ms, false},
		{"tiny remainder not rounded up", []outbound.BudgetOption{outbound.WithMinTimeout(0)}, 2*time.Second - time.Nanosecond, outbound.Call{}, time.Nanosecond, false},
		{"at the minimum", []outbound.BudgetOption{outbound.WithMinTimeout(30 * ms)}, 1970 * ms, outbound.Call{}, 30 * ms, false},
		{"below the minimum", []outbound.BudgetOption{outbound.WithMinTimeout(30 * ms)}, 1975 * ms, outbound.Call{}, 0, true},
		{"reserve eats the rest", []outbound.BudgetOption{outbound.WithMargin(200 * ms)}, time.Second, outbound.Call{Reserve: 800 * ms}, 0, true},
		{"margin reached", []outbound.BudgetOption{outbound.WithMargin(200 * ms)}, 1800 * ms, outbound.Call{}, 0, true},
		{"deadline passed", nil, 3 * time.Second, outbound.Call{}, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := &clock{start}
			b, err := outbound.NewBudget(ctx, "stage", clk.with(tc.opts)...)
			if err != nil {
				t.Fatal(err)
			}
			clk.t = start.Add(tc.at)
			got, err := b.Timeout(tc.call)
			if got != tc.want {
				t.Errorf("Timeout at start+%v (%+v) = %v, %v; want %v", tc.at, tc.call, got, err, tc.want)
			}
			if (err != nil) != (tc.want == 0) {
				t.Fatalf("Timeout at start+%v (%+v) error = %v, want an error only for an exhausted budget", tc.at, tc.call, err)
			}
			if err != nil && deadline.IsOwnCancellation(context.Background(), err) != tc.owned {
				t.Errorf("IsOwnCancellation(live, %v) = %v, want %v", err, !tc.owned, tc.owned)
			}
		})
	}
}

// TestBudgetExhaustedError: the exhausted error is a TIMEOUT outcome naming
// the stage, the dependency, the remaining and the allotted milliseconds.
func TestBudgetExhaustedError(t *testing.T) {
	start := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	ctx, cancel := context.WithDeadline(context.Background(), start.Add(2*time.Second))
	defer cancel()
	clk := &clock{start}
	b, err := outbound.NewBudget(ctx, "orders.submit", outbound.WithMargin(200*ms), outbound.WithMinTimeout(50*ms), outbound.WithClock(clk.now))
	if err != nil {
		t.Fatal(err)
	}
	clk.t = start.Add(1770 * ms)
	_, err = b.Timeout(outbound.Call{Dependency: "billing"})
	if pipelinetest.KindOf(err) != pipeline.KindTimeout || pipelinetest.CodeOf(err) != outbound.CodeBudgetExhausted {
		t.Fatalf("Timeout = %v, want TIMEOUT %s", err, outbound.CodeBudgetExhausted)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Error("errors.Is(exhausted, context.DeadlineExceeded) = false, want true")
	}
	var be *outbound.BudgetExhaustedError
	if !errors.As(err, &be) {
		t.Fatalf("errors.As(%v, *BudgetExhaustedError) = false", err)
	}
	if be.Stage != "orders.submit" || be.Dependency != "billing" || be.Remaining != 230*ms || be.Allotted != 30*ms || be.Cut {
		t.Errorf("BudgetExhaustedError = %+v, want stage orders.submit, dependency billing, remaining 230ms, allotted 30ms, not cut", be)
	}
	e := pipeline.AsError(err)
	want := map[string]any{"stage": "orders.submit", "dependency": "billing", "remainingMs": int64(230), "allottedMs": int64(30), "cut": false}
	for k, v := range want {
		if e.Details()[k] != v {
			t.Errorf("details[%q] = %v, want %v", k, e.Details()[k], v)
		}
	}
	if msg := e.Message(); e.Kind() == pipeline.KindUnexpected || !strings.Contains(msg, "'orders.submit'") || !strings.Contains(msg, "'billing'") || !strings.Contains(msg, "230 ms remaining, 30 ms allotted") {
		t.Errorf("Message() = %q, want stage, dependency and both figures", msg)
	}
}

// TestBudgetInvalid: non-positive totals, margins that eat the budget and
// bad options are errors, never panics.
func TestBudgetInvalid(t *testing.T) {
	start := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	dl, cancel := context.WithDeadline(context.Background(), start.Add(2*time.Second))
	defer cancel()
	for _, tc := range []struct {
		name      string
		ctx       context.Context
		opts      []outbound.BudgetOption
		exhausted bool   // a TIMEOUT outcome rather than a plain error
		mention   string // in the error text
	}{
		{"nil context", nil, nil, false, "nil context"},
		{"zero total", context.Background(), []outbound.BudgetOption{outbound.WithTotal(0)}, false, "WithTotal(0s)"},
		{"negative total", dl, []outbound.BudgetOption{outbound.WithTotal(-time.Second)}, false, "WithTotal(-1s)"},
		{"negative margin", dl, []outbound.BudgetOption{outbound.WithMargin(-ms)}, false, "WithMargin(-1ms)"},
		{"zero call cap", dl, []outbound.BudgetOption{outbound.WithCallCap(0)}, false, "WithCallCap(0s)"},
		{"negative minimum", dl, []outbound.BudgetOption{outbound.WithMinTimeout(-ms)}, false, "WithMinTimeout(-1ms)"},
		{"no deadline, no total", context.Background(), nil, false, "no deadline"},
		{"margin equals the budget", dl, []outbound.BudgetOption{outbound.WithMargin(2 * time.Second)}, true, "2000 ms remaining, 0 ms allotted"},
		{"margin beyond WithTotal", context.Background(), []outbound.BudgetOption{outbound.WithTotal(time.Second), outbound.WithMargin(2 * time.Second)}, true, "1000 ms remaining"},
		{"deadline already past", dl, []outbound.BudgetOption{}, true, "-1000 ms remaining"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := start
			if tc.name == "deadline already past" {
				now = start.Add(3 * time.Second)
			}
			b, err := outbound.NewBudget(tc.ctx, "checkout", (&clock{now}).with(tc.opts)...)
			if err == nil || b != nil {
				t.Fatalf("NewBudget(%s) = %v, %v; want an error", tc.name, b, err)
			}
			if got := pipelinetest.KindOf(err) == pipeline.KindTimeout && pipelinetest.CodeOf(err) == outbound.CodeBudgetExhausted; got != tc.exhausted {
				t.Errorf("NewBudget(%s) = %v; exhausted TIMEOUT = %v, want %v", tc.name, err, got, tc.exhausted)
			}
			if !strings.Contains(err.Error(), tc.mention) || !strings.Contains(err.Error(), "checkout") {
				t.Errorf("NewBudget(%s) error %q does not mention %q and the stage", tc.name, err, tc.mention)
			}
		})
	}
	b, err := outbound.NewBudget(dl, "checkout", outbound.WithClock((&clock{start}).now))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []outbound.Call{{Share: 1.5}, {Share: -0.1}, {Share: math.NaN()}, {Reserve: -ms}, {Cap: -ms}} {
		if d, err := b.Timeout(c); err == nil || pipelinetest.KindOf(err) == pipeline.KindTimeout {
			t.Errorf("Timeout(%+v) = %v, %v; want a plain error", c, d, err)
		}
		if ctx, cancel, err := b.Context(dl, c); err == nil || ctx != dl || cancel == nil {
			t.Errorf("Context(%+v) = %v, %v; want ctx itself, a no-op cancel and an error", c, ctx, err)
		} else {
			cancel()
		}
	}
}

// TestBudgetBreakerView: running out of the caller's own deadline is not a
// breaker failure; running out of a cap the operation chose, or of a total
// it chose, is.
func TestBudgetBreakerView(t *testing.T) {
	for _, tc := range []struct {
		name     string
		deadline time.Duration
		opts     []outbound.BudgetOption
		call     outbound.Call
		own      bool
	}{
		{"caller's short deadline", 100 * ms, []outbound.BudgetOption{outbound.WithMinTimeout(200 * ms)}, outbound.Call{Dependency: "inventory"}, true},
		{"operation's own total", time.Second, []outbound.BudgetOption{outbound.WithTotal(100 * ms), outbound.WithMinTimeout(200 * ms)}, outbound.Call{Dependency: "inventory"}, false},
		{"operation's own cap", time.Second, []outbound.BudgetOption{outbound.WithMinTimeout(200 * ms)}, outbound.Call{Dependency: "inventory", Cap: 100 * ms}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				inv := due(tc.deadline, pipeline.DeadlineCaller)
				var own bool
				_, err := deadline.Middleware().Invoke(t.Context(), inv, func(ctx context.Context, _ *pipeline.Invocation) (any, error) {
					b, err := outbound.NewBudget(ctx, "orders.submit", tc.opts...)
					if err != nil {
						own = deadline.IsOwnCancellation(ctx, err)
						return nil, err
					}
					_, err = b.Timeout(tc.call)
					own = deadline.IsOwnCancellation(ctx, err)
					return nil, err
				})
				if pipelinetest.CodeOf(err) != outbound.CodeBudgetExhausted {
					t.Fatalf("Invoke = %v, want the exhausted TIMEOUT", err)
				}
				if own != tc.own {
					t.Errorf("IsOwnCancellation(handler ctx, %v) = %v, want %v", err, own, tc.own)
				}
			})
		})
	}
}

// clock is a time source for WithClock that a test sets.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

// with returns opts and WithClock(c.now), leaving opts as they are.
func (c *clock) with(opts []outbound.BudgetOption) []outbound.BudgetOption {
	return append(append([]outbound.BudgetOption(nil), opts...), outbound.WithClock(c.now))
}

// due returns an invocation whose effective deadline, from source, is
// after from now.
func due(after time.Duration, source pipeline.DeadlineSource) *pipeline.Invocation {
	return pipeline.NewInvocation(pipeline.Spec{Deadline: time.Now().Add(after), DeadlineSource: source})
}
