package resilience_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
	"github.com/sundial-go/sundial/resilience"
	"github.com/sundial-go/sundial/resilience/deadline"
)

// unfired is a context whose deadline has passed but whose timer has not
// run yet: Deadline reports it, Err is still nil. The kernel's guard is
// such a context for a moment after every deadline.
type unfired struct {
	context.Context
	d time.Time
}

func (u unfired) Deadline() (time.Time, bool) { return u.d, true }
func (u unfired) Done() <-chan struct{}       { return make(chan struct{}) }
func (u unfired) Err() error                  { return nil }

// TestDeadlinePassedBeforeStartNeverRuns: an operation's deadline that
// passed after the call arrived but before its handler would start ends
// the call with TIMEOUT, and the handler never starts. This holds whatever
// the parent context (one that cannot be cancelled, one that can, one that
// ends at the deadline but whose timer has not run), with or without
// limits; the limits give their permits back as neutral, so the breaker
// stays closed and the slot is free for the next call.
func TestDeadlinePassedBeforeStartNeverRuns(t *testing.T) {
	parents := map[string]func(t *testing.T, d time.Time) context.Context{
		"background": func(*testing.T, time.Time) context.Context { return context.Background() },
		"cancellable": func(t *testing.T, _ time.Time) context.Context {
			ctx, cancel := context.WithCancel(t.Context())
			t.Cleanup(cancel)
			return ctx
		},
		"bound, timer not run": func(t *testing.T, d time.Time) context.Context { return unfired{t.Context(), d} },
	}
	for name, parent := range parents {
		for _, limited := range []bool{false, true} {
			t.Run(name+map[bool]string{false: "", true: "/limits"}[limited], func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					mw := deadline.Middleware()
					if limited {
						mw = resilience.NewLimits(opID,
							resilience.Policy{FailureThreshold: 1, BreakDuration: time.Minute, ConcurrencyLimit: 1})
					}
					now := time.Now()
					d := now.Add(-time.Microsecond)
					late := pipeline.NewInvocation(pipeline.Spec{Operation: op(opID), Arrival: now.Add(-time.Millisecond),
						Deadline: d, DeadlineSource: pipeline.DeadlineOperation})
					ran := false
					_, err := mw.Invoke(parent(t, d), late, func(context.Context, *pipeline.Invocation) (any, error) {
						ran = true
						return "ran", nil
					})
					wantCode(t, "Invoke", err, pipeline.CodeTimeout)
					if ran {
						t.Fatal("the handler started after its deadline had passed")
					}
					next := pipeline.NewInvocation(pipeline.Spec{Operation: op(opID), Arrival: now,
						Deadline: now.Add(time.Second), DeadlineSource: pipeline.DeadlineOperation})
					if out, err := mw.Invoke(t.Context(), next, func(context.Context, *pipeline.Invocation) (any, error) {
						return "ok", nil
					}); err != nil || out != "ok" {
						t.Fatalf("the next call = %v, %v; want ok (limits given back, breaker closed)", out, err)
					}
				})
			})
		}
	}
}

// wantCode fails unless err has code.
func wantCode(t *testing.T, what string, err error, code string) {
	t.Helper()
	if got := pipelinetest.CodeOf(err); got != code {
		t.Errorf("%s = %v (code %q), want code %q", what, err, got, code)
	}
}
