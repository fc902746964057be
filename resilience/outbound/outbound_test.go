package outbound

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/baggage"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundial-go/sundial/kernel/propagation"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
	"github.com/sundial-go/sundial/resilience"
)

// dep builds a Dependency whose jitter is fixed at its top (each sleep is
// the full backoff), so instants are exact.
func dep(t *testing.T, p Policy) *Dependency {
	t.Helper()
	d, err := New("billing", p)
	if err != nil {
		t.Fatal(err)
	}
	d.jitter = func() float64 { return 1 }
	return d
}

func unavailable() error {
	return pipeline.NewError(pipeline.KindUnavailable, "BILLING_UNAVAILABLE_001", "down")
}

func withKey(ctx context.Context) context.Context {
	ctx, _ = propagation.WithIdempotencyKey(ctx, "k-1")
	return ctx
}

// recorder returns an attempt function that records the instant (since
// start) of every attempt and answers with answer(n).
func recorder(start time.Time, at *[]time.Duration, answer func(n int) error) func(context.Context) error {
	return func(context.Context) error {
		*at = append(*at, time.Since(start))
		return answer(len(*at))
	}
}

func equal(t *testing.T, got, want []time.Duration) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("attempts at %v, want %v", got, want)
	}
}

func TestBackoffNeverCrossesDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := DefaultPolicy()
		p.Attempts, p.BackoffBase, p.BackoffMax, p.FailureThreshold = 10, 100*time.Millisecond, time.Second, 0
		d := dep(t, p)
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		start := time.Now()
		var at []time.Duration
		want := unavailable()
		err := d.Do(ctx, recorder(start, &at, func(int) error { return want }))
		// 0, +100, +200, +400 ms; the next sleep (800 ms) would end at
		// 1.5 s, past the deadline: the call ends at once at 700 ms.
		equal(t, at, []time.Duration{0, 100 * time.Millisecond, 300 * time.Millisecond, 700 * time.Millisecond})
		if err != want {
			t.Fatalf("err = %v, want the downstream's answer", err)
		}
		if el := time.Since(start); el != 700*time.Millisecond {
			t.Fatalf("Do returned after %v, want 700ms", el)
		}
	})
}

func TestBackoffJitterStaysInItsHalf(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := DefaultPolicy()
		p.BackoffBase, p.FailureThreshold = 100*time.Millisecond, 0
		d := dep(t, p)
		d.jitter = func() float64 { return 0 }
		start := time.Now()
		var at []time.Duration
		_ = d.Do(t.Context(), recorder(start, &at, func(int) error { return unavailable() }))
		equal(t, at, []time.Duration{0, 50 * time.Millisecond, 150 * time.Millisecond})
	})
}

// retryAfterCall calls a dependency whose first answer is first, then
// success, with a 2 s deadline, and returns the attempts' instants, the
// outcome and when Do returned.
func retryAfterCall(t *testing.T, first error) ([]time.Duration, error, time.Duration) {
	d := dep(t, DefaultPolicy())
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	start := time.Now()
	var at []time.Duration
	err := d.Do(ctx, recorder(start, &at, func(n int) error {
		if n == 1 {
			return first
		}
		return nil
	}))
	return at, err, time.Since(start)
}

func TestRetryAfterPastDeadlineEndsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		want := pipeline.NewError(pipeline.KindUnavailable, resilience.CodeRateLimited, "slow down").WithRetryAfter(5 * time.Second)
		at, err, el := retryAfterCall(t, want)
		equal(t, at, []time.Duration{0})
		if err != want || el != 0 {
			t.Fatalf("err = %v after %v, want the downstream's 503 at once", err, el)
		}
	})
}

func TestRetryAfterHonoured(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		at, err, _ := retryAfterCall(t, unavailable().(*pipeline.Error).WithRetryAfter(700*time.Millisecond))
		// The retry-after (700 ms) replaces the shorter backoff (50 ms).
		equal(t, at, []time.Duration{0, 700 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
	})
}

// TestBudgetStopsRetriesAtRatio: 1000 calls to a dependency that fails
// every attempt. Without the budget each call would make 3 attempts (3000);
// with a budget of 0.2 and a reserve of 10, the retries stay within
// 0.2 × 1000 + 10.
func TestBudgetStopsRetriesAtRatio(t *testing.T) {
	for _, tc := range []struct {
		name        string
		ratio       float64
		reserve     int
		least, most int64
	}{
		{"budget 0.2", 0.2, 10, 1000 + 200, 1000 + 210},
		{"naive (no budget)", 1, maxBudgetMin, 3000, 3000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := DefaultPolicy()
				p.BudgetRatio, p.BudgetMin, p.FailureThreshold = tc.ratio, tc.reserve, 0
				d := dep(t, p)
				var sent atomic.Int64
				for range 1000 {
					_ = d.Do(t.Context(), func(context.Context) error { sent.Add(1); return unavailable() })
				}
				if n := sent.Load(); n < tc.least || n > tc.most {
					t.Fatalf("the dependency received %d attempts for 1000 calls, want %d to %d", n, tc.least, tc.most)
				}
			})
		})
	}
}

func TestHedgeLosersCancelledOnFirstAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := DefaultPolicy()
		p.HedgeDelay, p.SafeToHedge = 100*time.Millisecond, true
		d := dep(t, p)
		start := time.Now()
		var calls atomic.Int32
		var loserErr atomic.Value
		var loserEnd atomic.Int64
		err := d.Do(t.Context(), func(ctx context.Context) error {
			if calls.Add(1) == 1 { // the slow replica
				<-ctx.Done()
				loserErr.Store(ctx.Err())
				loserEnd.Store(int64(time.Since(start)))
				return ctx.Err()
			}
			time.Sleep(50 * time.Millisecond)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if el := time.Since(start); el != 150*time.Millisecond {
			t.Fatalf("Do returned after %v, want 150ms (hedge at 100ms answering in 50ms)", el)
		}
		if calls.Load() != 2 || loserErr.Load() != context.Canceled || loserEnd.Load() != int64(150*time.Millisecond) {
			t.Fatalf("calls %d, loser %v at %v: want 2 calls and the first cancelled at 150ms",
				calls.Load(), loserErr.Load(), time.Duration(loserEnd.Load()))
		}
	})
}

// TestHedgeDelayFollowsTheQuantile: with HedgeQuantile 0.5, a call hedges
// after the fixed 100 ms until 20 successes are in; with 20 (one of 0 ms,
// nine of 10 ms, ten of 30 ms) a stuck attempt is hedged at their median,
// 30 ms; 16 samples later (fifteen of 5 ms, one of 0) the median is 10 ms.
func TestHedgeDelayFollowsTheQuantile(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := DefaultPolicy()
		p.HedgeDelay, p.HedgeQuantile, p.SafeToHedge, p.BudgetMin = 100*time.Millisecond, 0.5, true, 1000
		d := dep(t, p)
		quick := func(took time.Duration) func(context.Context) error {
			return func(context.Context) error { time.Sleep(took); return nil }
		}
		// hedgeAt returns when a call whose first attempt is stuck hedged.
		hedgeAt := func() time.Duration {
			start := time.Now()
			var second time.Duration
			var n atomic.Int32
			_ = d.Do(t.Context(), func(ctx context.Context) error {
				if n.Add(1) == 1 {
					<-ctx.Done()
					return ctx.Err()
				}
				second = time.Since(start)
				return nil // not recorded: it took no time
			})
			return second
		}
		if at := hedgeAt(); at != 100*time.Millisecond {
			t.Fatalf("with no samples the hedge started at %v, want the fixed 100ms", at)
		}
		for i := range 19 { // the success of hedgeAt's hedge (0 s) was the first sample
			took := 10 * time.Millisecond
			if i >= 9 {
				took = 30 * time.Millisecond
			}
			_ = d.Do(t.Context(), quick(took))
		}
		if at := hedgeAt(); at != 30*time.Millisecond {
			t.Fatalf("after 20 samples the hedge started at %v, want their median 30ms", at)
		}
		for range 15 { // hedgeAt's success was one more
			_ = d.Do(t.Context(), quick(5*time.Millisecond))
		}
		if at := hedgeAt(); at != 10*time.Millisecond {
			t.Fatalf("after 36 samples the hedge started at %v, want their median 10ms", at)
		}
	})
}

func TestNoHedgeWithoutKeyUnlessSafe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := DefaultPolicy()
		p.HedgeDelay = 100 * time.Millisecond
		d := dep(t, p)
		for _, tc := range []struct {
			ctx   context.Context
			calls int32
		}{{t.Context(), 1}, {withKey(t.Context()), 2}} {
			var calls atomic.Int32
			_ = d.Do(tc.ctx, func(context.Context) error {
				calls.Add(1)
				time.Sleep(300 * time.Millisecond)
				return nil
			})
			if calls.Load() < tc.calls || tc.calls == 1 && calls.Load() != 1 {
				t.Fatalf("keyed=%v: %d attempts, want %d", tc.ctx != t.Context(), calls.Load(), tc.calls)
			}
		}
	})
}

func TestHedgesDrawFromTheBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := DefaultPolicy()
		p.HedgeDelay, p.SafeToHedge, p.BudgetRatio, p.BudgetMin = 10*time.Millisecond, true, 0, 1
		d := dep(t, p)
		var calls atomic.Int32
		slow := func(context.Context) error { calls.Add(1); time.Sleep(time.Second); return nil }
		_ = d.Do(t.Context(), slow) // 2 attempts: the one token pays one hedge
		_ = d.Do(t.Context(), slow) // 1 attempt: the budget is empty
		if calls.Load() != 3 {
			t.Fatalf("%d attempts, want 3", calls.Load())
		}
	})
}

func TestWhatIsRetried(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	reset := &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
	for _, tc := range []struct {
		name  string
		err   error
		keyed bool
		want  int
		// unanswered: the dependency gave no answer, so the call's
		// outcome is CodeDependencyUnavailable wrapping the last error.
		unanswered bool
	}{
		{"unavailable", unavailable(), false, 3, false},
		{"grpc Unavailable", status.Error(codes.Unavailable, "down"), false, 3, true},
		{"connection refused", refused, false, 3, true},
		{"not sent", NotSent(errors.New("dial")), false, 3, true},
		{"not sent, marked by another package", fmt.Errorf("post: %w", foreignNotSent{}), false, 3, true},
		{"validation (caller fault)", pipeline.NewError(pipeline.KindValidation, "X_VALIDATION_001", "bad"), true, 1, false},
		{"conflict (caller fault)", pipeline.NewError(pipeline.KindConflict, "X_CONFLICT_001", "dup"), true, 1, false},
		{"grpc InvalidArgument", status.Error(codes.InvalidArgument, "bad"), true, 1, false},
		{"cancelled", context.Canceled, true, 1, false},
		{"timeout without key", pipeline.NewError(pipeline.KindTimeout, "X_TIMEOUT_001", "slow"), false, 1, false},
		{"timeout with key", pipeline.NewError(pipeline.KindTimeout, "X_TIMEOUT_001", "slow"), true, 3, false},
		{"reset without key", reset, false, 1, true},
		{"reset with key", reset, true, 3, true},
		{"unexpected without key", errors.New("boom"), false, 1, false},
		{"unexpected with key", errors.New("boom"), true, 3, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := DefaultPolicy()
				p.FailureThreshold = 0
				d := dep(t, p)
				ctx := t.Context()
				if tc.keyed {
					ctx = withKey(ctx)
				}
				n := 0
				err := d.Do(ctx, func(context.Context) error { n++; return tc.err })
				if tc.unanswered {
					e := pipeline.AsError(err)
					if dep, _ := e.Details()["dependency"]; n != tc.want || e.Code() != CodeDependencyUnavailable ||
						e.Kind() != pipeline.KindUnavailable || dep != "billing" || !errors.Is(err, tc.err) {
						t.Fatalf("%d attempts, err %v; want %d and %s naming billing, wrapping the last error",
							n, err, tc.want, CodeDependencyUnavailable)
					}
					return
				}
				if n != tc.want || err != tc.err {
					t.Fatalf("%d attempts, err %v; want %d and the last answer", n, err, tc.want)
				}
			})
		})
	}
}

// foreignNotSent is how a client package marks a failure before any byte
// was sent without importing this one.
type foreignNotSent struct{}

func (foreignNotSent) Error() string { return "dial failed" }
func (foreignNotSent) NotSent() bool { return true }

func TestNilDependencyRunsOnce(t *testing.T) {
	var d *Dependency
	n := 0
	err := d.Do(t.Context(), func(context.Context) error { n++; return unavailable() })
	if n != 1 || err == nil {
		t.Fatalf("%d attempts, err %v; want one attempt and its answer", n, err)
	}
}

func TestOwnDeadlineEndsRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := DefaultPolicy()
		p.FailureThreshold = 0
		d := dep(t, p)
		ctx, cancel := context.WithTimeout(withKey(t.Context()), 500*time.Millisecond)
		defer cancel()
		n := 0
		err := d.Do(ctx, func(ctx context.Context) error { n++; <-ctx.Done(); return ctx.Err() })
		if n != 1 || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%d attempts, err %v: want 1 attempt ended by our own deadline", n, err)
		}
	})
}

func TestNoAttemptWithoutMinTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := dep(t, DefaultPolicy()) // MinAttemptTimeout 10 ms
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Millisecond)
		defer cancel()
		err := d.Do(ctx, func(context.Context) error { t.Fatal("attempt started"); return nil })
		if pipelinetest.CodeOf(err) != CodeBudgetExhausted {
			t.Fatalf("err = %v, want %s", err, CodeBudgetExhausted)
		}
	})
}

func TestBreakerPerDependency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := DefaultPolicy()
		p.Attempts, p.FailureThreshold, p.BreakDuration = 1, 2, 5*time.Second
		d := dep(t, p)
		n := 0
		fail := func(context.Context) error { n++; return unavailable() }
		_, _ = d.Do(t.Context(), fail), d.Do(t.Context(), fail)
		err := d.Do(t.Context(), fail)
		e := pipeline.AsError(err)
		ra, ok := e.RetryAfter()
		if n != 2 || e.Code() != CodeDependencyOpen || e.Kind() != pipeline.KindUnavailable || !ok || ra != 5*time.Second {
			t.Fatalf("%d attempts, err %v (retry-after %v): want 2 and an open breaker for 5s", n, err, ra)
		}
		// Caller faults do not open it.
		time.Sleep(5 * time.Second)
		if err := d.Do(t.Context(), func(context.Context) error { return nil }); err != nil {
			t.Fatalf("probe: %v", err)
		}
		for range 3 {
			_ = d.Do(t.Context(), func(context.Context) error {
				return pipeline.NewError(pipeline.KindValidation, "X_VALIDATION_001", "bad")
			})
		}
		if err := d.Do(t.Context(), func(context.Context) error { return nil }); err != nil {
			t.Fatalf("caller faults opened the breaker: %v", err)
		}
	})
}

func TestReconfigureKeepsBreakerAndBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := DefaultPolicy()
		p.Attempts, p.FailureThreshold = 1, 1
		d := dep(t, p)
		_ = d.Do(t.Context(), func(context.Context) error { return unavailable() })
		p.Attempts = 3
		if err := d.Reconfigure(p); err != nil {
			t.Fatal(err)
		}
		if err := d.Do(t.Context(), func(context.Context) error { return nil }); pipelinetest.CodeOf(err) != CodeDependencyOpen {
			t.Fatalf("err = %v: a reload closed the open breaker", err)
		}
	})
}

func TestPolicyErrorsNameTheirField(t *testing.T) {
	p := DefaultPolicy()
	p.Attempts, p.BudgetRatio, p.BackoffMax = 0, 2, time.Millisecond
	_, err := New("x", p)
	for _, want := range []string{"Attempts: 0 is out of range", "BudgetRatio: 2 is out of range", "BackoffMax: 1ms is below BackoffBase"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("err = %v, want %q", err, want)
		}
	}
	d, _ := New("x", DefaultPolicy())
	if d.Reconfigure(p) == nil || d.cur.Load().p.Attempts != 3 {
		t.Fatal("an invalid policy was applied")
	}
}

// TestStatsCount: a call retried twice, a hedge, and the two hedges the
// empty budget refused (the second call's third attempt, the third
// call's second) are counted; the breaker's state is reported.
func TestStatsCount(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := DefaultPolicy()
		p.HedgeDelay, p.SafeToHedge, p.BudgetRatio, p.BudgetMin = 10*time.Millisecond, true, 0, 3
		d := dep(t, p)
		var n atomic.Int32
		_ = d.Do(t.Context(), func(context.Context) error { // not hedged: it fails at once, twice
			if n.Add(1) < 3 {
				return unavailable()
			}
			return nil
		})
		slow := func(context.Context) error { time.Sleep(time.Second); return nil }
		_ = d.Do(t.Context(), slow) // one hedge takes the last token; a second is refused
		_ = d.Do(t.Context(), slow) // the budget refuses the hedge
		want := Stats{Attempts: 6, Retries: 2, Hedges: 1, BudgetRefusals: 2, HasBreaker: true, Breaker: resilience.BreakerClosed}
		if got := d.Stats(); got != want {
			t.Fatalf("Stats() = %+v, want %+v", got, want)
		}
		if (*Dependency)(nil).Stats() != (Stats{}) {
			t.Fatal("a nil Dependency has stats")
		}
	})
}

// TestCreateKeyGivesEveryAttemptTheSameKey: with CreateKey, a call without
// a key gets one, the same on every attempt, so its TIMEOUT is retried;
// a caller's own key is kept; without CreateKey a TIMEOUT is final.
func TestCreateKeyGivesEveryAttemptTheSameKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		timeout := pipeline.NewError(pipeline.KindTimeout, "BILLING_TIMEOUT_001", "slow")
		for _, tc := range []struct {
			create bool
			ctx    context.Context
			want   []string // the key each attempt carried; "new" is a made one
		}{
			{true, t.Context(), []string{"new", "new", "new"}},
			{true, withKey(t.Context()), []string{"k-1", "k-1", "k-1"}},
			{false, t.Context(), []string{""}},
		} {
			p := DefaultPolicy()
			p.CreateKey, p.BackoffBase, p.BackoffMax = tc.create, time.Millisecond, time.Millisecond
			var keys []string
			_ = dep(t, p).Do(tc.ctx, func(ctx context.Context) error {
				keys = append(keys, baggage.FromContext(ctx).Member(propagation.BaggageIdempotencyKey).Value())
				return timeout
			})
			if len(keys) != len(tc.want) {
				t.Fatalf("CreateKey %v: %d attempts (keys %q), want %d", tc.create, len(keys), keys, len(tc.want))
			}
			for i, k := range keys {
				w := tc.want[i]
				if w == "new" && (!strings.HasPrefix(k, "sundial-") || len(k) != 34 || k != keys[0]) || w != "new" && k != w {
					t.Fatalf("CreateKey %v: attempt keys %q, want %q", tc.create, keys, tc.want)
				}
			}
		}
	})
}

// TestBaggageIdempotencyKeyIsTelemetrys: outbound's copy of the baggage key
// is the kernel's.
func TestBaggageIdempotencyKeyIsTelemetrys(t *testing.T) {
	if baggageIdempotencyKey != propagation.BaggageIdempotencyKey {
		t.Errorf("%q, want %q", baggageIdempotencyKey, propagation.BaggageIdempotencyKey)
	}
}
