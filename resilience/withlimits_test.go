package resilience_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
	"github.com/sundial-go/sundial/resilience"
	"github.com/sundial-go/sundial/resilience/deadline"
)

// compositions are the two ways to run the deadline and the limits: the
// plain chain and one the deadline middleware WithLimits. They must not differ
// in behavior.
var compositions = []struct {
	name    string
	compose func(*resilience.Limits) []pipeline.Middleware
}{
	{"chain", func(l *resilience.Limits) []pipeline.Middleware {
		return []pipeline.Middleware{deadline.Middleware(), l}
	}},
	{"WithLimits", func(l *resilience.Limits) []pipeline.Middleware {
		return []pipeline.Middleware{l}
	}},
}

// TestWithLimitsMatchesTheChain: the same calls through the chain and
// through WithLimits end with the same outcome and timing, and leave the
// limits in the same state.
func TestWithLimitsMatchesTheChain(t *testing.T) {
	down := errors.New("db: connection reset")
	for _, tc := range []struct {
		name     string
		p        resilience.Policy
		first    pipeline.Handler // a call that uses the limit up (nil: none)
		hold     bool             // the first call holds its slot until the end
		deadline time.Duration    // the second call's (0: none)
		want     string
		wantAt   time.Duration
		breaker  resilience.BreakerState
	}{
		{"admitted", resilience.Policy{FailureThreshold: 1, PermitLimit: 5, ConcurrencyLimit: 5, Timeout: time.Second}, nil, false, 0, "", 0, resilience.BreakerClosed},
		{"rate limited", resilience.Policy{PermitLimit: 1, Window: time.Minute, Timeout: time.Second}, okHandler, false, 0, resilience.CodeRateLimited, 0, resilience.BreakerClosed},
		{"concurrency limited", resilience.Policy{ConcurrencyLimit: 1, Timeout: time.Hour}, okHandler, true, 0, resilience.CodeConcurrencyLimited, 0, resilience.BreakerClosed},
		{"breaker open", resilience.Policy{FailureThreshold: 1, BreakDuration: time.Minute}, func(context.Context, *pipeline.Invocation) (any, error) { return nil, down }, false, 0, resilience.CodeCircuitOpen, 0, resilience.BreakerOpen},
		{"rate queue, admitted in the next window", resilience.Policy{PermitLimit: 1, Window: 10 * time.Second, QueueLimit: 1}, okHandler, false, 30 * time.Second, "", 10 * time.Second, resilience.BreakerClosed},
		{"concurrency queue, ends at the deadline", resilience.Policy{ConcurrencyLimit: 1, ConcurrencyQueueLimit: 1, FailureThreshold: 1}, okHandler, true, 3 * time.Second, pipeline.CodeTimeout, 3 * time.Second, resilience.BreakerClosed},
		{"expired on arrival never reaches the breaker", resilience.Policy{FailureThreshold: 1, BreakDuration: time.Minute}, nil, false, -time.Second, pipeline.CodeTimeout, 0, resilience.BreakerClosed},
	} {
		for _, c := range compositions {
			t.Run(tc.name+"/"+c.name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					l := resilience.NewLimits(opID, tc.p)
					release := make(chan struct{})
					h := pipeline.Chain(func(ctx context.Context, inv *pipeline.Invocation) (any, error) {
						if inv.Input() == "first" {
							if tc.hold {
								<-release
							}
							return tc.first(ctx, inv)
						}
						return nil, nil
					}, c.compose(l)...)
					firstDone := make(chan error, 1)
					if tc.first != nil {
						go func() {
							_, err := h(t.Context(), withDeadline(t.Context(), newInv("first"), tc.p.Timeout))
							firstDone <- err
						}()
						if !tc.hold {
							<-firstDone
						}
						synctest.Wait()
					}
					s := pipeline.Spec{Operation: op(opID), Input: "second"}
					if tc.deadline != 0 {
						s.Deadline = time.Now().Add(tc.deadline)
					}
					start := time.Now()
					_, err := h(t.Context(), withDeadline(t.Context(), pipeline.NewInvocation(s), tc.p.Timeout))
					if pipelinetest.CodeOf(err) != tc.want || time.Since(start) != tc.wantAt {
						t.Errorf("call = %v after %v, want code %q after %v", err, time.Since(start), tc.want, tc.wantAt)
					}
					if s := l.State().Breaker; s != tc.breaker {
						t.Errorf("BreakerState() = %v, want %v", s, tc.breaker)
					}
					close(release)
					if tc.hold {
						<-firstDone
					}
					if n := l.State().InFlight; n != 0 {
						t.Errorf("InFlight() = %d after every call returned, want 0", n)
					}
				})
			})
		}
	}
}

// TestWithLimitsRejectionCostsNoContext: through WithLimits, a call the
// limits turn away allocates nothing (its deadline context is never
// created); through the chain it pays for the context first.
func TestWithLimitsRejectionCostsNoContext(t *testing.T) {
	for _, c := range compositions {
		l := resilience.NewLimits(opID, resilience.Policy{PermitLimit: 1, Window: time.Hour})
		h := pipeline.Chain(okHandler, c.compose(l)...)
		inv := pipeline.NewInvocation(pipeline.Spec{Operation: op(opID), Deadline: time.Now().Add(time.Hour), DeadlineSource: pipeline.DeadlineOperation})
		ctx := context.Background()
		_, _ = h(ctx, inv) // the window's only permit
		n := testing.AllocsPerRun(500, func() {
			if _, err := h(ctx, inv); pipelinetest.CodeOf(err) != resilience.CodeRateLimited {
				t.Fatalf("%s: call = %v, want a rate-limit rejection", c.name, err)
			}
		})
		if c.name == "WithLimits" && n != 0 {
			t.Errorf("AllocsPerRun(rejection through WithLimits) = %v, want 0", n)
		}
		if c.name == "chain" && n == 0 {
			t.Errorf("AllocsPerRun(rejection through the chain) = 0, want the deadline context's allocations (is the comparison still meaningful?)")
		}
	}
}

// TestInnerInvocationLeavesOuterContextAlone: a middleware invoked from
// inside a handler, for an invocation without a deadline, does not settle
// the outer invocation's context: the outer handler still sees its
// deadline pass.
func TestInnerInvocationLeavesOuterContextAlone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		inner := resilience.NewLimits("inner", resilience.Policy{FailureThreshold: 5, BreakDuration: time.Second})
		_, err := deadline.Middleware().Invoke(t.Context(), pipeline.NewInvocation(pipeline.Spec{
			Deadline: time.Now().Add(time.Second), DeadlineSource: pipeline.DeadlineKernel,
		}), func(ctx context.Context, _ *pipeline.Invocation) (any, error) {
			if _, err := inner.Invoke(ctx, pipeline.NewInvocation(pipeline.Spec{}), func(context.Context, *pipeline.Invocation) (any, error) {
				return nil, nil
			}); err != nil {
				t.Fatalf("inner Invoke = %v", err)
			}
			time.Sleep(2 * time.Second)
			if err := ctx.Err(); err != context.DeadlineExceeded {
				t.Errorf("outer ctx.Err() past its deadline = %v, want DeadlineExceeded", err)
			}
			return nil, ctx.Err()
		})
		if pipelinetest.CodeOf(err) != pipeline.CodeTimeout {
			t.Errorf("outer Invoke = %v, want TIMEOUT", err)
		}
	})
}
