package resilience_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience"
)

// compositions are the two ways to run the deadline and the limits: the
// plain chain and the kernel's Stage. They must not differ in behaviour.
var compositions = []struct {
	name    string
	compose func(*resilience.DeadlineMiddleware, *resilience.OperationLimits) []pipeline.Middleware
}{
	{"chain", func(dm *resilience.DeadlineMiddleware, l *resilience.OperationLimits) []pipeline.Middleware {
		return []pipeline.Middleware{dm, l}
	}},
	{"stage", func(dm *resilience.DeadlineMiddleware, l *resilience.OperationLimits) []pipeline.Middleware {
		return []pipeline.Middleware{resilience.Stage(dm, l)}
	}},
}

// TestStageMatchesTheChain: the same calls through the chain and through
// Stage end with the same outcome, original outcome and timing, and leave
// the limits in the same state.
func TestStageMatchesTheChain(t *testing.T) {
	down := errors.New("db: connection reset")
	for _, tc := range []struct {
		name     string
		p        resilience.Policy
		first    func(*pipeline.Invocation) error // a call that uses the limit up (nil: none)
		hold     bool                             // the first call holds its slot until the end
		deadline time.Duration                    // the second call's (0: none)
		want     string
		wantAt   time.Duration
		breaker  resilience.BreakerState
		orig     string // the original outcome's code, when it is not want's
	}{
		{"admitted", resilience.Policy{FailureThreshold: 1, PermitLimit: 5, ConcurrencyLimit: 5, Timeout: time.Second}, nil, false, 0, "", 0, resilience.BreakerClosed, ""},
		{"rate limited", resilience.Policy{PermitLimit: 1, Window: time.Minute, Timeout: time.Second}, okHandler, false, 0, pipeline.CodeRateLimited, 0, resilience.BreakerClosed, ""},
		{"concurrency limited", resilience.Policy{ConcurrencyLimit: 1, Timeout: time.Hour}, okHandler, true, 0, pipeline.CodeConcurrencyLimited, 0, resilience.BreakerClosed, ""},
		{"breaker open", resilience.Policy{FailureThreshold: 1, BreakDuration: time.Minute}, func(*pipeline.Invocation) error { return down }, false, 0, pipeline.CodeCircuitOpen, 0, resilience.BreakerOpen, ""},
		{"rate queue, admitted in the next window", resilience.Policy{PermitLimit: 1, Window: 10 * time.Second, QueueLimit: 1}, okHandler, false, 30 * time.Second, "", 10 * time.Second, resilience.BreakerClosed, ""},
		{"concurrency queue, ends at the deadline", resilience.Policy{ConcurrencyLimit: 1, ConcurrencyQueueLimit: 1, FailureThreshold: 1}, okHandler, true, 3 * time.Second, pipeline.CodeTimeout, 3 * time.Second, resilience.BreakerClosed, pipeline.CodeCancelled},
		{"expired on arrival never reaches the breaker", resilience.Policy{FailureThreshold: 1, BreakDuration: time.Minute}, nil, false, -time.Second, pipeline.CodeTimeout, 0, resilience.BreakerClosed, ""},
	} {
		for _, c := range compositions {
			t.Run(tc.name+"/"+c.name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					l := resilience.NewResilienceMiddleware(opID, tc.p)
					release := make(chan struct{})
					h := pipeline.Chain(func(inv *pipeline.Invocation) error {
						if inv.Input() == "first" {
							if tc.hold {
								<-release
							}
							return tc.first(inv)
						}
						return nil
					}, c.compose(resilience.NewDeadlineMiddleware(tc.p.Timeout, time.Hour), l)...)
					firstDone := make(chan error, 1)
					if tc.first != nil {
						go func() { firstDone <- h(pipeline.NewInvocation(t.Context(), op(opID), "first")) }()
						if !tc.hold {
							<-firstDone
						}
						synctest.Wait()
					}
					inv := pipeline.NewInvocation(t.Context(), op(opID), "second")
					if tc.deadline != 0 {
						inv.SetDeadline(time.Now().Add(tc.deadline))
					}
					start := time.Now()
					err := h(inv)
					if pipeline.CodeOf(err) != tc.want || time.Since(start) != tc.wantAt {
						t.Errorf("call = %v after %v, want code %q after %v", err, time.Since(start), tc.want, tc.wantAt)
					}
					wantOrig := tc.want
					if tc.orig != "" {
						wantOrig = tc.orig // the invocation's own end, which the breaker does not count
					}
					if orig := inv.OriginalOutcome(); pipeline.CodeOf(orig) != wantOrig {
						t.Errorf("OriginalOutcome() = %v, want code %q", orig, wantOrig)
					}
					if s := l.BreakerState(); s != tc.breaker {
						t.Errorf("BreakerState() = %v, want %v", s, tc.breaker)
					}
					close(release)
					if tc.hold {
						<-firstDone
					}
					if n := l.InFlight(); n != 0 {
						t.Errorf("InFlight() = %d after every call returned, want 0", n)
					}
				})
			})
		}
	}
}

// TestStageRejectionCostsNoContext: through Stage, a call the limits turn
// away allocates nothing (its deadline context is never created); through
// the chain it pays for the context first.
func TestStageRejectionCostsNoContext(t *testing.T) {
	for _, c := range compositions {
		l := resilience.NewResilienceMiddleware(opID, resilience.Policy{PermitLimit: 1, Window: time.Hour, Timeout: time.Second})
		h := pipeline.Chain(okHandler, c.compose(resilience.NewDeadlineMiddleware(time.Second, time.Minute), l)...)
		inv := pipeline.NewInvocation(context.Background(), op(opID), nil)
		_ = h(inv) // the window's only permit
		n := testing.AllocsPerRun(500, func() {
			inv.SetDeadline(time.Time{})
			if err := h(inv); pipeline.CodeOf(err) != pipeline.CodeRateLimited {
				t.Fatalf("%s: call = %v, want a rate-limit rejection", c.name, err)
			}
		})
		if c.name == "stage" && n != 0 {
			t.Errorf("AllocsPerRun(rejection through Stage) = %v, want 0", n)
		}
		if c.name == "chain" && n == 0 {
			t.Errorf("AllocsPerRun(rejection through the chain) = 0, want the deadline context's allocations (is the comparison still meaningful?)")
		}
	}
}
