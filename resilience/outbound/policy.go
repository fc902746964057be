// Package outbound runs the calls a service makes to its dependencies, under
// one policy per dependency. A policy has retries with exponential backoff
// and jitter, never past the call's deadline. It has a retry budget, so that
// an outage downstream is never amplified. It has optional hedging drawn from
// the same budget. It has a circuit breaker with the same type and rules as
// the inbound one (resilience's Limits).
//
// Build a [Dependency] from a [Policy] once per dependency, and run each call
// with [Dependency.Do]. The HTTP transport and the gRPC client interceptor of
// the adapters use it. Any other client can too.
//
// An attempt is retried only when its outcome says the downstream did not act
// on it. It is retried too when acting twice is harmless.
//
//   - UNAVAILABLE outcomes are retried: a *pipeline.Error of KindUnavailable,
//     with or without a retry-after, or a gRPC Unavailable status. So are a
//     connection refused and an error marked by [NotSent] (nothing reached
//     the wire).
//   - TIMEOUT outcomes and ambiguous failures are retried only when the call
//     carries an idempotency key. Ambiguous failures are UNEXPECTED, a reset
//     connection, and any other transport error. The key is the W3C baggage
//     member sundial.idempotency-key (see baggageIdempotencyKey). With
//     it, the downstream can tell a retry from a new call.
//   - A caller fault (VALIDATION, UNAUTHENTICATED, FORBIDDEN, NOT_FOUND,
//     CONFLICT, UNPROCESSABLE) is never retried. Nor is CANCELLED, nor any
//     outcome once the call's own context has ended.
//
// One tier retries, not every tier. When a policy allows a retry, every
// attempt carries the retry mark, the baggage member sundial.retried. A call
// whose context carries it (a tier above retries it) makes one attempt, as
// [Dependency.DoOnce] does, and passes the mark on.
package outbound

import (
	"errors"
	"fmt"
	"time"
)

// Policy is the outbound policy of one dependency. Start from
// [DefaultPolicy] and change what you need: the zero Policy is not valid
// (Attempts 0).
type Policy struct {
	// Attempts is the most attempts one call makes, the first and hedges
	// included. It is 1 to 10 (1: no retry, no hedge).
	Attempts int
	// MinAttemptTimeout is the least time an attempt needs. An attempt starts
	// only when at least this much remains of the call's deadline.
	MinAttemptTimeout time.Duration
	// AttemptTimeout caps one attempt (0: only the call's deadline).
	AttemptTimeout time.Duration
	// BackoffBase is the backoff before the first retry; it doubles with
	// each retry, up to BackoffMax. Each sleep is drawn uniformly from
	// [backoff/2, backoff] (equal jitter).
	BackoffBase, BackoffMax time.Duration
	// BudgetRatio is the retries and hedges the budget earns per first attempt
	// (0 to 1; 0.2: one retry per five calls). BudgetMin is the tokens it holds
	// at most and starts with (see [Dependency]).
	BudgetRatio float64
	BudgetMin   int
	// HedgeDelay, when positive, starts another attempt each time this long
	// passes without an answer (up to Attempts in flight). Hedging a call needs
	// an idempotency key, unless SafeToHedge is set. SafeToHedge says that the
	// dependency's calls are safe to repeat (reads).
	HedgeDelay  time.Duration
	SafeToHedge bool
	// HedgeQuantile, when positive (below 1), replaces HedgeDelay by a quantile
	// of recent latency (eg 0.9: hedge the slowest tenth). It is taken over the
	// dependency's last 128 successful attempts, once 20 are in. HedgeDelay
	// still turns hedging on, and is the delay until then.
	HedgeQuantile float64
	// CreateKey gives a call that carries no idempotency key a fresh one before
	// its first attempt. So every attempt carries the same key. Set it when the
	// dependency's operations take keys (eg Idempotency on billing.charge). A
	// TIMEOUT or a lost answer is then retried and answered once.
	CreateKey bool
	// FailureThreshold, when positive, gives the dependency a circuit breaker.
	// It opens after this many consecutive failed attempts and fails calls fast
	// for BreakDuration.
	FailureThreshold int
	BreakDuration    time.Duration
	// Throttle turns on adaptive throttling. A call or a retry is refused
	// locally with probability max(0, (requests − K·accepts) / (requests + 1)).
	// Requests are the attempts the dependency failed or accepted within the
	// last ThrottleWindow; K is ThrottleK (1 to 100). Neutral outcomes are not
	// counted: a caller fault (4xx), or the call's own cancel or deadline.
	Throttle       bool
	ThrottleK      float64
	ThrottleWindow time.Duration
}

// DefaultPolicy returns the defaults. A call makes 3 attempts, and an attempt
// needs 10 ms. The backoff is 50 ms, doubling to 1 s. The budget is 20 % of
// calls with a reserve of 10. There is no hedging. A breaker opens after 5
// consecutive failures, for 5 s. Throttling is off; on, K is 2 over 10 s.
func DefaultPolicy() Policy {
	return Policy{
		Attempts:          3,
		MinAttemptTimeout: 10 * time.Millisecond,
		BackoffBase:       50 * time.Millisecond,
		BackoffMax:        time.Second,
		BudgetRatio:       0.2,
		BudgetMin:         10,
		FailureThreshold:  5,
		BreakDuration:     5 * time.Second,
		ThrottleK:         2,
		ThrottleWindow:    10 * time.Second,
	}
}

// maxAttempts bounds Policy.Attempts.
const maxAttempts = 10

// maxThrottleK bounds Policy.ThrottleK.
const maxThrottleK = 100

// validate returns the policy's errors, each naming its field.
func (p Policy) validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: "+format, append([]any{field}, args...)...))
	}
	if p.Attempts < 1 || p.Attempts > maxAttempts {
		bad("Attempts", "%d is out of range (1 to %d)", p.Attempts, maxAttempts)
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"MinAttemptTimeout", p.MinAttemptTimeout}, {"AttemptTimeout", p.AttemptTimeout},
		{"BackoffBase", p.BackoffBase}, {"BackoffMax", p.BackoffMax}, {"HedgeDelay", p.HedgeDelay},
		{"BreakDuration", p.BreakDuration}} {
		if f.d < 0 {
			bad(f.name, "%v is negative", f.d)
		}
	}
	if p.BackoffMax < p.BackoffBase {
		bad("BackoffMax", "%v is below BackoffBase (%v)", p.BackoffMax, p.BackoffBase)
	}
	if p.AttemptTimeout > 0 && p.AttemptTimeout < p.MinAttemptTimeout {
		bad("AttemptTimeout", "%v is below MinAttemptTimeout (%v)", p.AttemptTimeout, p.MinAttemptTimeout)
	}
	if !(p.BudgetRatio >= 0 && p.BudgetRatio <= 1) { // NaN fails too
		bad("BudgetRatio", "%v is out of range (0 to 1)", p.BudgetRatio)
	}
	if !(p.HedgeQuantile >= 0 && p.HedgeQuantile < 1) {
		bad("HedgeQuantile", "%v is out of range (0 to below 1)", p.HedgeQuantile)
	}
	if p.BudgetMin < 0 || p.BudgetMin > maxBudgetMin {
		bad("BudgetMin", "%d is out of range (0 to %d)", p.BudgetMin, maxBudgetMin)
	}
	if p.FailureThreshold < 0 {
		bad("FailureThreshold", "%d is negative", p.FailureThreshold)
	}
	if p.Throttle && !(p.ThrottleK >= 1 && p.ThrottleK <= maxThrottleK) {
		bad("ThrottleK", "%v is out of range (1 to %d)", p.ThrottleK, maxThrottleK)
	}
	if p.Throttle && p.ThrottleWindow < throttleBuckets*time.Millisecond {
		bad("ThrottleWindow", "%v is below %v", p.ThrottleWindow, throttleBuckets*time.Millisecond)
	}
	if p.FailureThreshold > 0 && p.BreakDuration <= 0 {
		bad("BreakDuration", "must be positive with a breaker (FailureThreshold %d)", p.FailureThreshold)
	}
	return errors.Join(errs...)
}
