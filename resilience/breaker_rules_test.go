package resilience_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
	"github.com/sundial-go/sundial/resilience"
	"github.com/sundial-go/sundial/resilience/outbound"
)

// neutralOutcomes are the outcomes the breaker must neither count, nor let
// reset the run of failures, nor let close a half-open breaker: caller
// faults and throttling rejections (the framework's and an application
// limiter's).
var neutralOutcomes = []struct {
	name string
	err  error
}{
	{"VALIDATION", pipeline.NewError(pipeline.KindValidation, "SHOP_VALIDATION_001", "bad input")},
	{"UNAUTHENTICATED", pipeline.NewError(pipeline.KindUnauthenticated, "SHOP_UNAUTHENTICATED_001", "who are you")},
	{"FORBIDDEN", pipeline.NewError(pipeline.KindForbidden, "SHOP_FORBIDDEN_001", "not yours")},
	{"NOT_FOUND", pipeline.NewError(pipeline.KindNotFound, "SHOP_NOT_FOUND_001", "no such order")},
	{"CONFLICT", pipeline.NewError(pipeline.KindConflict, "SHOP_CONFLICT_001", "already paid")},
	{"wrapped VALIDATION", fmt.Errorf("orders: %w", pipeline.NewError(pipeline.KindValidation, "SHOP_VALIDATION_002", "bad sku"))},
	{"KERNEL_UNAVAILABLE_002 (rate limited)", resilience.RateLimited("tenant.acme", 3*time.Second)},
	{"KERNEL_UNAVAILABLE_002 of an application limiter", resilience.RateLimited(opID, time.Second).WithDetail("tenant", "acme")},
	{"KERNEL_UNAVAILABLE_003 (concurrency limited)", resilience.ConcurrencyLimited("tenant.acme")},
	{"KERNEL_UNAVAILABLE_003 built by hand", pipeline.NewError(pipeline.KindUnavailable, resilience.CodeConcurrencyLimited, "busy")},
	{"CANCELLED", pipeline.ErrCanceled()},
}

var errDown = pipeline.NewError(pipeline.KindUnavailable, "SHOP_UNAVAILABLE_001", "db down")

// TestBreakerNeutralOutcomesDoNotResetTheRun: FailureThreshold-1 failures,
// then a neutral outcome, then one failure opens the breaker: the neutral
// outcome did not reset the run of failures.
func TestBreakerNeutralOutcomesDoNotResetTheRun(t *testing.T) {
	const threshold = 3
	for _, tc := range neutralOutcomes {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h, l := breakerStack(t, resilience.Policy{FailureThreshold: threshold, BreakDuration: 10 * time.Second})
				for i := range threshold - 1 {
					expectCode(t, fmt.Sprintf("failure %d", i+1), invokeLimited(t.Context(), h, errDown), "SHOP_UNAVAILABLE_001")
				}
				expectCode(t, "neutral outcome", invokeLimited(t.Context(), h, tc.err), pipelinetest.CodeOf(tc.err))
				expectBreaker(t, "after threshold-1 failures and a neutral outcome", l, resilience.BreakerClosed)
				expectCode(t, "one more failure", invokeLimited(t.Context(), h, errDown), "SHOP_UNAVAILABLE_001")
				expectBreaker(t, "after the failure that completes the run", l, resilience.BreakerOpen)
			})
		})
	}
}

// TestBreakerNeutralOutcomesNeverOpen: any number of neutral outcomes in a
// row leaves the breaker closed.
func TestBreakerNeutralOutcomesNeverOpen(t *testing.T) {
	for _, tc := range neutralOutcomes {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h, l := breakerStack(t, resilience.Policy{FailureThreshold: 1})
				for range 5 {
					_ = invokeLimited(t.Context(), h, tc.err)
				}
				expectBreaker(t, "after five neutral outcomes", l, resilience.BreakerClosed)
			})
		})
	}
}

// TestBreakerNeutralProbeFreesTheSlot: a half-open probe with a neutral
// outcome neither closes nor re-opens the breaker; it frees the probe's
// slot, so the next call is the probe (not a KERNEL_UNAVAILABLE_004).
func TestBreakerNeutralProbeFreesTheSlot(t *testing.T) {
	for _, tc := range neutralOutcomes {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h, l := breakerStack(t, resilience.Policy{FailureThreshold: 1, BreakDuration: 10 * time.Second})
				expectCode(t, "failure", invokeLimited(t.Context(), h, errDown), "SHOP_UNAVAILABLE_001")
				time.Sleep(10 * time.Second)
				expectBreaker(t, "after the break", l, resilience.BreakerHalfOpen)
				expectCode(t, "neutral probe", invokeLimited(t.Context(), h, tc.err), pipelinetest.CodeOf(tc.err))
				expectBreaker(t, "after the neutral probe", l, resilience.BreakerHalfOpen)
				// The next call probes; a failure re-opens, a success closes.
				expectCode(t, "next call is the probe and fails", invokeLimited(t.Context(), h, errDown), "SHOP_UNAVAILABLE_001")
				expectBreaker(t, "after the failed probe", l, resilience.BreakerOpen)
				time.Sleep(10 * time.Second)
				expectCode(t, "neutral probe again", invokeLimited(t.Context(), h, tc.err), pipelinetest.CodeOf(tc.err))
				expectCode(t, "next call is the probe and succeeds", invokeLimited(t.Context(), h, nil), "")
				expectBreaker(t, "after the successful probe", l, resilience.BreakerClosed)
			})
		})
	}
}

// honoursContext is a handler that waits for its context to end and
// returns ctx.Err().
func honoursContext(ctx context.Context, _ *pipeline.Invocation) (any, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestBreakerDeadlineBySource: a handler that honours its context and
// returns ctx.Err() at the invocation's deadline counts as a failure when
// the binding deadline is the operation's own (TimeoutSeconds) or the
// kernel's cap — FailureThreshold of them open the breaker — and is
// neutral when it is the caller's: it neither counts nor resets the run.
func TestBreakerDeadlineBySource(t *testing.T) {
	const threshold = 3
	for _, tc := range []struct {
		source  pipeline.DeadlineSource
		failure bool
	}{
		{pipeline.DeadlineOperation, true},
		{pipeline.DeadlineKernel, true},
		{pipeline.DeadlineCaller, false},
	} {
		t.Run(tc.source.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h, l := breakerStack(t, resilience.Policy{FailureThreshold: threshold, BreakDuration: time.Minute})
				timeout := func(what string) {
					t.Helper()
					inv := pipeline.NewInvocation(pipeline.Spec{Operation: op(opID), Input: honoursContext,
						Deadline: time.Now().Add(time.Second), DeadlineSource: tc.source})
					start := time.Now()
					_, err := h(t.Context(), inv)
					expectCode(t, what, err, pipeline.CodeTimeout)
					if el := time.Since(start); el != time.Second {
						t.Fatalf("%s: ended after %v, want 1s (the deadline)", what, el)
					}
				}
				if tc.failure {
					for i := range threshold - 1 {
						timeout(fmt.Sprintf("timeout %d", i+1))
						expectBreaker(t, fmt.Sprintf("after %d timeouts", i+1), l, resilience.BreakerClosed)
					}
					timeout("the threshold-th timeout")
					expectBreaker(t, "after threshold timeouts", l, resilience.BreakerOpen)
					return
				}
				for range 2 * threshold {
					timeout("caller's deadline")
				}
				expectBreaker(t, "after many timeouts at the caller's deadline", l, resilience.BreakerClosed)
				// Neutral, not a success: it does not reset the run.
				for i := range threshold - 1 {
					expectCode(t, fmt.Sprintf("failure %d", i+1), invokeLimited(t.Context(), h, errDown), "SHOP_UNAVAILABLE_001")
				}
				timeout("caller's deadline within a run of failures")
				expectBreaker(t, "after threshold-1 failures and a caller timeout", l, resilience.BreakerClosed)
				expectCode(t, "one more failure", invokeLimited(t.Context(), h, errDown), "SHOP_UNAVAILABLE_001")
				expectBreaker(t, "after the failure that completes the run", l, resilience.BreakerOpen)
			})
		})
	}
}

// TestBreakerDeadlineEndings: how a deadline or a cancellation ended the
// call, not what the handler returned, decides; a TIMEOUT returned while
// the context is live is a failure; a budget bounded by the caller's
// deadline is neutral.
func TestBreakerDeadlineEndings(t *testing.T) {
	ignore := func(ret error) func(context.Context, *pipeline.Invocation) (any, error) {
		return func(context.Context, *pipeline.Invocation) (any, error) {
			time.Sleep(2 * time.Second) // past the deadline, ignoring the context
			return "late", ret
		}
	}
	budget := func(ctx context.Context, _ *pipeline.Invocation) (any, error) {
		b, err := outbound.NewBudget(ctx, "orders.submit", outbound.WithMinTimeout(2*time.Second))
		if err != nil {
			return nil, err
		}
		_, err = b.Timeout(outbound.Call{Dependency: "inventory"})
		return nil, err
	}
	for _, tc := range []struct {
		name    string
		source  pipeline.DeadlineSource
		cancel  bool // the caller cancels after 500ms
		handler func(context.Context, *pipeline.Invocation) (any, error)
		want    resilience.BreakerState
	}{
		{"operation deadline, handler ignores it and succeeds", pipeline.DeadlineOperation, false, ignore(nil), resilience.BreakerOpen},
		{"operation deadline, handler returns a caller fault", pipeline.DeadlineOperation, false, ignore(pipeline.NewError(pipeline.KindValidation, "V", "bad")), resilience.BreakerOpen},
		{"caller deadline, handler ignores it and fails", pipeline.DeadlineCaller, false, ignore(errDown), resilience.BreakerClosed},
		{"operation deadline, caller cancels first", pipeline.DeadlineOperation, true, honoursContext, resilience.BreakerClosed},
		{"downstream TIMEOUT with a live context", pipeline.DeadlineCaller, false, func(context.Context, *pipeline.Invocation) (any, error) {
			return nil, pipeline.NewError(pipeline.KindTimeout, "SHOP_TIMEOUT_001", "inventory timed out")
		}, resilience.BreakerOpen},
		{"budget bounded by the caller's deadline", pipeline.DeadlineCaller, false, budget, resilience.BreakerClosed},
		{"budget bounded by the operation's deadline", pipeline.DeadlineOperation, false, budget, resilience.BreakerOpen},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h, l := breakerStack(t, resilience.Policy{FailureThreshold: 1, BreakDuration: time.Minute})
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				if tc.cancel {
					time.AfterFunc(500*time.Millisecond, cancel)
				}
				inv := pipeline.NewInvocation(pipeline.Spec{Operation: op(opID), Input: tc.handler,
					Deadline: time.Now().Add(time.Second), DeadlineSource: tc.source})
				_, _ = h(ctx, inv)
				expectBreaker(t, tc.name, l, tc.want)
			})
		})
	}
}

// TestBreakerProbeIgnoringItsContext: a half-open probe whose handler
// ignores its context is judged at its deadline, and its slot freed then:
// with the caller's deadline (neutral) the next call after the deadline is
// the probe — not rejected with KERNEL_UNAVAILABLE_004 — although the
// first handler is still running; with the operation's deadline (a
// failure) the breaker re-opens at the deadline, for a full break from
// then. The ignoring handler returning later changes the breaker no more.
func TestBreakerProbeIgnoringItsContext(t *testing.T) {
	for _, tc := range []struct {
		name   string
		source pipeline.DeadlineSource
		late   error // what the ignoring handler returns, long after its deadline
	}{
		{"caller deadline, returns success late", pipeline.DeadlineCaller, nil},
		{"caller deadline, returns a failure late", pipeline.DeadlineCaller, errDown},
		{"operation deadline, returns success late", pipeline.DeadlineOperation, nil},
		{"operation deadline, returns a failure late", pipeline.DeadlineOperation, errDown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h, l := breakerStack(t, resilience.Policy{FailureThreshold: 1, BreakDuration: 10 * time.Second})
				expectCode(t, "failure", invokeLimited(t.Context(), h, errDown), "SHOP_UNAVAILABLE_001")
				time.Sleep(10 * time.Second)

				running := make(chan struct{})
				returned := make(chan error, 1)
				ignoring := func(context.Context, *pipeline.Invocation) (any, error) {
					close(running)
					time.Sleep(5 * time.Second) // ignores its context
					return nil, tc.late
				}
				go func() {
					inv := pipeline.NewInvocation(pipeline.Spec{Operation: op(opID), Input: ignoring,
						Deadline: time.Now().Add(time.Second), DeadlineSource: tc.source})
					_, err := h(t.Context(), inv)
					returned <- err
				}()
				<-running
				time.Sleep(500 * time.Millisecond)
				err := invokeLimited(t.Context(), h, nil)
				expectCode(t, "call while the probe runs, before its deadline", err, resilience.CodeCircuitOpen)

				time.Sleep(500 * time.Millisecond) // the probe's deadline
				synctest.Wait()
				select {
				case err := <-returned:
					t.Fatalf("the ignoring probe returned %v at its deadline; the test needs it still running", err)
				default:
				}
				if tc.source == pipeline.DeadlineCaller {
					expectBreaker(t, "at the probe's (caller's) deadline", l, resilience.BreakerHalfOpen)
					expectCode(t, "next call after the probe's deadline is the probe", invokeLimited(t.Context(), h, nil), "")
					expectBreaker(t, "after the new probe succeeded", l, resilience.BreakerClosed)
				} else {
					expectBreaker(t, "at the probe's (operation's) deadline", l, resilience.BreakerOpen)
					err := invokeLimited(t.Context(), h, nil)
					expectCode(t, "next call after the failed probe", err, resilience.CodeCircuitOpen)
					if ra, _ := pipeline.AsError(err).RetryAfter(); ra != 10*time.Second {
						t.Errorf("retry-after = %v, want a full break of 10s from the deadline", ra)
					}
				}
				want := l.State().Breaker

				err = <-returned // 5 s after it started, within the break
				expectCode(t, "the ignoring probe's outcome", err, pipeline.CodeTimeout)
				expectBreaker(t, "after the ignoring probe returned", l, want)
				if want == resilience.BreakerClosed {
					// Closed with no failure counted: one failure opens it
					// (threshold 1), but the late return did not.
					expectCode(t, "a failure", invokeLimited(t.Context(), h, errDown), "SHOP_UNAVAILABLE_001")
					expectBreaker(t, "after a fresh failure", l, resilience.BreakerOpen)
				}
			})
		})
	}
}

// TestBreakerProbeWatchReleasedWhenTheProbeReturns: a probe that returns
// before its deadline is judged by its outcome once; the watch on its
// context does nothing more when the context ends afterwards (the test's
// goleak check also sees no goroutine left behind).
func TestBreakerProbeWatchReleasedWhenTheProbeReturns(t *testing.T) {
	for _, tc := range []struct {
		name string
		ret  error
		want resilience.BreakerState
	}{
		{"success", nil, resilience.BreakerClosed},
		{"failure", errDown, resilience.BreakerOpen},
		{"neutral", pipeline.NewError(pipeline.KindNotFound, "SHOP_NOT_FOUND_001", "no"), resilience.BreakerHalfOpen},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h, l := breakerStack(t, resilience.Policy{FailureThreshold: 1, BreakDuration: 10 * time.Second})
				expectCode(t, "failure", invokeLimited(t.Context(), h, errDown), "SHOP_UNAVAILABLE_001")
				time.Sleep(10 * time.Second)
				ctx, cancel := context.WithCancel(t.Context())
				inv := pipeline.NewInvocation(pipeline.Spec{Operation: op(opID), Input: tc.ret,
					Deadline: time.Now().Add(time.Second), DeadlineSource: pipeline.DeadlineOperation})
				_, _ = h(ctx, inv)
				expectBreaker(t, "after the probe", l, tc.want)
				cancel()
				time.Sleep(2 * time.Second) // past the probe's deadline
				synctest.Wait()
				expectBreaker(t, "after the probe's context ended", l, tc.want)
			})
		})
	}
}

// TestBreakerPanickingProbeFails: a probe whose handler panics re-opens
// the breaker once (the watch on its context does not judge it again).
func TestBreakerPanickingProbeFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, l := breakerStack(t, resilience.Policy{FailureThreshold: 1, BreakDuration: 10 * time.Second})
		expectCode(t, "failure", invokeLimited(t.Context(), h, errors.New("db down")), pipeline.CodeUnexpected)
		time.Sleep(10 * time.Second)
		expectCode(t, "panicking probe", invokeLimited(t.Context(), h, "panic"), pipeline.CodeUnexpected)
		expectBreaker(t, "after the panicking probe", l, resilience.BreakerOpen)
		time.Sleep(10 * time.Second)
		expectCode(t, "next probe", invokeLimited(t.Context(), h, nil), "")
		expectBreaker(t, "after the next probe", l, resilience.BreakerClosed)
	})
}
