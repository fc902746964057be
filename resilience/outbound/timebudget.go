package outbound

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience/internal/deadlinectx"
)

// CodeBudgetExhausted is the code of the TIMEOUT outcome a [Budget] returns
// when it cannot cover an outbound call. A call it cut has that outcome as
// its context's cause (see [BudgetExhaustedError]).
const CodeBudgetExhausted = "KERNEL_TIMEOUT_002"

// Budget splits what remains of a deadline across the outbound calls of one
// handler. Create it with [NewBudget] from the handler's context. Its end
// is the context's deadline, or earlier with [WithTotal]. The deadline
// middleware (package deadline) sets the invocation's deadline there.
//
// Each call asks for its timeout with [Budget.Timeout], or gets a derived
// context with [Budget.Context]. The allotment is
//
//	min(cap, (end - now - margin - reserve) × share)
//
// The margin ([WithMargin]) is kept back for the handler's own work after
// the last call, such as assembling the reply. The reserve
// ([Call].Reserve) is kept for the steps after this call. The share
// ([Call].Share) is this call's fraction when several calls run in
// parallel. The cap ([Call].Cap or [WithCallCap]) bounds one call.
// Sequential calls consume the budget naturally: each allotment is
// computed from what remains when it is asked for.
//
// An allotment that is not positive, or below the minimum timeout
// ([WithMinTimeout], default 0), is not started. The Budget returns a
// TIMEOUT outcome (code [CodeBudgetExhausted]) instead. It wraps a
// [*BudgetExhaustedError] that names the stage, the dependency, and the
// remaining and allotted milliseconds. A handler can return that error as
// it is. A Budget never rounds an allotment up: it never gives a call more
// time than remains. So a downstream deadline is never later than the
// upstream one, and the margin and reserves stay intact.
//
// A Budget is immutable; it is safe for concurrent use by parallel calls.
type Budget struct {
	stage      string
	now        func() time.Time
	end        time.Time
	margin     time.Duration
	callCap    time.Duration
	minTimeout time.Duration
	// callerBound: end is the context's deadline, not shortened by
	// WithTotal, so running out of it is the caller's deadline running out.
	callerBound bool
}

// BudgetOption configures a [Budget]. Options are validated by NewBudget.
type BudgetOption interface{ applyBudget(*budgetConfig) }

type budgetConfig struct {
	now                                func() time.Time
	total, margin, callCap, minTimeout time.Duration
	totalSet, capSet                   bool
}

type budgetOptionFunc func(*budgetConfig)

func (f budgetOptionFunc) applyBudget(c *budgetConfig) { f(c) }

// WithTotal bounds the budget to at most total from its creation, even when
// the context's deadline is later or absent. total must be positive.
func WithTotal(total time.Duration) BudgetOption {
	return budgetOptionFunc(func(c *budgetConfig) { c.total, c.totalSet = total, true })
}

// WithMargin keeps margin back at the end of the budget for the handler's
// own work after its calls. The default is 0; margin must not be negative.
// A margin that leaves nothing of the budget makes NewBudget return the
// exhausted error.
func WithMargin(margin time.Duration) BudgetOption {
	return budgetOptionFunc(func(c *budgetConfig) { c.margin = margin })
}

// WithCallCap bounds every call's allotment (a [Call].Cap overrides it).
// The default is no cap; capacity must be positive.
func WithCallCap(capacity time.Duration) BudgetOption {
	return budgetOptionFunc(func(c *budgetConfig) { c.callCap, c.capSet = capacity, true })
}

// WithMinTimeout sets the smallest allotment worth starting a call with;
// a call that would get less is refused with the exhausted error instead.
// The default, 0, starts a call with any positive time, however small: an
// allotment is never rounded up. d must not be negative.
func WithMinTimeout(d time.Duration) BudgetOption {
	return budgetOptionFunc(func(c *budgetConfig) { c.minTimeout = d })
}

// WithClock makes the budget read the time from now instead of
// time.Now: at its creation and for every call. It suits tests and
// examples that need fixed instants. now must not be nil.
func WithClock(now func() time.Time) BudgetOption {
	return budgetOptionFunc(func(c *budgetConfig) { c.now = now })
}

// Call describes one outbound call to [Budget.Timeout]. The zero value is a
// call to an unnamed dependency that may use everything the budget has
// left.
type Call struct {
	// Dependency names the downstream, for the exhausted error and logs.
	Dependency string
	// Reserve is kept for the steps after this call (default 0; not
	// negative).
	Reserve time.Duration
	// Share is the fraction of what is available (after the margin and the
	// reserve) this call may use, for one of several parallel calls. It must
	// be in (0, 1]; 0 means 1.
	Share float64
	// Cap bounds this call's allotment, overriding WithCallCap (default 0:
	// the budget's cap, if any; not negative).
	Cap time.Duration
}

// NewBudget returns the budget of stage for calls made with ctx, starting
// now. stage names the budget in errors and logs: the operation or the
// step. The budget's end is ctx's deadline, or now + WithTotal's total
// when that is earlier.
//
// NewBudget returns a plain error for invalid options: a non-positive
// total or cap, or a negative margin or minimum timeout. It does so too
// when ctx has no deadline and no WithTotal was given. It returns the
// exhausted TIMEOUT outcome (see [Budget]) when the margin leaves nothing
// of the budget, a deadline already past included. It never panics.
func NewBudget(ctx context.Context, stage string, opts ...BudgetOption) (*Budget, error) {
	c := budgetConfig{now: time.Now}
	for _, o := range opts {
		if o != nil {
			o.applyBudget(&c)
		}
	}
	switch {
	case ctx == nil:
		return nil, fmt.Errorf("outbound: budget %q: nil context", stage)
	case c.totalSet && c.total <= 0:
		return nil, fmt.Errorf("outbound: budget %q: WithTotal(%v): the total must be positive", stage, c.total)
	case c.margin < 0:
		return nil, fmt.Errorf("outbound: budget %q: WithMargin(%v): the margin must not be negative", stage, c.margin)
	case c.capSet && c.callCap <= 0:
		return nil, fmt.Errorf("outbound: budget %q: WithCallCap(%v): the cap must be positive", stage, c.callCap)
	case c.minTimeout < 0:
		return nil, fmt.Errorf("outbound: budget %q: WithMinTimeout(%v): the minimum must not be negative", stage, c.minTimeout)
	case c.now == nil:
		return nil, fmt.Errorf("outbound: budget %q: WithClock(nil): the clock must not be nil", stage)
	}
	now := c.now()
	b := &Budget{stage: stage, now: c.now, margin: c.margin, callCap: c.callCap, minTimeout: c.minTimeout}
	if d, ok := ctx.Deadline(); ok {
		b.end, b.callerBound = d, true
	}
	if c.totalSet {
		if t := now.Add(c.total); b.end.IsZero() || t.Before(b.end) {
			b.end, b.callerBound = t, false
		}
	}
	if b.end.IsZero() {
		return nil, fmt.Errorf("outbound: budget %q: the context has no deadline and WithTotal was not given", stage)
	}
	if remaining := b.end.Sub(now); remaining-b.margin <= 0 {
		return nil, b.exhausted("", remaining, 0, b.callerBound, false)
	}
	return b, nil
}

// Timeout returns the allotment of call c starting now, or an error. The
// error is a plain one for an invalid Call. It is the exhausted TIMEOUT
// outcome when the allotment is not positive or is below the minimum
// timeout.
func (b *Budget) Timeout(c Call) (time.Duration, error) {
	d, _, err := b.allot(b.now(), c)
	return d, err
}

// Context returns a context for call c derived from ctx, the handler's
// context or one derived from it. The context ends when c's allotment
// runs out. Its cause is then the TIMEOUT outcome of a cut
// [BudgetExhaustedError]. That wraps context.DeadlineExceeded, so
// http.Client and grpc-go report a deadline. The derived deadline is
// never later than ctx's. Call the CancelFunc when the call is done. On
// error, the same as Timeout's, Context returns ctx itself and a
// CancelFunc that does nothing.
func (b *Budget) Context(ctx context.Context, c Call) (context.Context, context.CancelFunc, error) {
	now := b.now()
	d, callerBound, err := b.allot(now, c)
	if err != nil {
		return ctx, func() {}, err
	}
	cut := b.exhausted(c.Dependency, b.end.Sub(now), d, callerBound, true)
	ctx, cancel := context.WithDeadlineCause(ctx, now.Add(d), cut)
	return ctx, cancel, nil
}

// allot computes c's allotment at now and whether it is bounded by the
// caller's deadline (rather than by a cap or WithTotal).
func (b *Budget) allot(now time.Time, c Call) (time.Duration, bool, error) {
	switch {
	case c.Reserve < 0:
		return 0, false, fmt.Errorf("outbound: budget %q: call to %q: Reserve must not be negative, got %v", b.stage, c.Dependency, c.Reserve)
	case c.Cap < 0:
		return 0, false, fmt.Errorf("outbound: budget %q: call to %q: Cap must not be negative, got %v", b.stage, c.Dependency, c.Cap)
	case math.IsNaN(c.Share) || c.Share < 0 || c.Share > 1:
		return 0, false, fmt.Errorf("outbound: budget %q: call to %q: Share must be in (0, 1], got %v", b.stage, c.Dependency, c.Share)
	}
	remaining := b.end.Sub(now)
	d := remaining - b.margin - c.Reserve
	if c.Share > 0 && c.Share < 1 && d > 0 {
		d = time.Duration(float64(d) * c.Share)
	}
	callerBound := b.callerBound
	capacity := b.callCap
	if c.Cap > 0 {
		capacity = c.Cap
	}
	if capacity > 0 && d > capacity {
		d, callerBound = capacity, false
	}
	if d <= 0 || d < b.minTimeout {
		return 0, false, b.exhausted(c.Dependency, remaining, max(d, 0), callerBound, false)
	}
	return d, callerBound, nil
}

// exhausted returns the TIMEOUT outcome of an exhausted budget.
func (b *Budget) exhausted(dep string, remaining, allotted time.Duration, callerBound, cut bool) *pipeline.Error {
	e := &BudgetExhaustedError{Stage: b.stage, Dependency: dep, Remaining: remaining, Allotted: allotted, Cut: cut}
	e.deadlineMark = deadlinectx.Marked(callerBound)
	return e.Outcome()
}

// BudgetExhaustedError describes a call a [Budget] could not cover, or a
// call it cut when its allotment ran out. It wraps
// context.DeadlineExceeded. Budgets return it wrapped in its TIMEOUT
// outcome ([BudgetExhaustedError.Outcome]); find it with errors.As.
type BudgetExhaustedError struct {
	// Stage is the budget's stage name.
	Stage string
	// Dependency is the call's Dependency ("" when NewBudget itself found
	// the budget exhausted).
	Dependency string
	// Remaining is the time that was left until the end of the budget,
	// margin included, when the call was refused (or started, if Cut). It
	// is negative when the end had passed.
	Remaining time.Duration
	// Allotted is what the call was given (0 when refused because nothing
	// was left; the allotment that fell short of the minimum timeout
	// otherwise).
	Allotted time.Duration
	// Cut is true for a call that was started and cut at the end of its
	// allotment, false for a call that was never started.
	Cut bool

	deadlineMark // whether the allotment ended at the invocation's deadline
}

// deadlineMark lets the deadline package tell a caller-bound budget apart.
type deadlineMark = deadlinectx.Mark

// Error implements error.
func (e *BudgetExhaustedError) Error() string {
	if e.Cut {
		return fmt.Sprintf("outbound: budget %q: call to '%s' cut after its allotted %d ms (%d ms remained when it started)",
			e.Stage, e.Dependency, e.Allotted.Milliseconds(), e.Remaining.Milliseconds())
	}
	return fmt.Sprintf("outbound: budget %q exhausted%s: %d ms remaining, %d ms allotted",
		e.Stage, e.before(), e.Remaining.Milliseconds(), e.Allotted.Milliseconds())
}

func (e *BudgetExhaustedError) before() string {
	if e.Dependency == "" {
		return ""
	}
	return " before calling '" + e.Dependency + "'"
}

// Unwrap returns context.DeadlineExceeded, whose Timeout method reports
// true.
func (e *BudgetExhaustedError) Unwrap() error { return context.DeadlineExceeded }

// Outcome returns e as a TIMEOUT outcome with code [CodeBudgetExhausted],
// wrapping e, with details "stage", "dependency", "remainingMs",
// "allottedMs" (whole milliseconds, truncated) and "cut".
func (e *BudgetExhaustedError) Outcome() *pipeline.Error {
	var msg string
	if e.Cut {
		msg = fmt.Sprintf("The call to '%s' in '%s' ran out of its allotted %d ms.", e.Dependency, e.Stage, e.Allotted.Milliseconds())
	} else {
		msg = fmt.Sprintf("The time budget of '%s' was exhausted%s: %d ms remaining, %d ms allotted.",
			e.Stage, e.before(), e.Remaining.Milliseconds(), e.Allotted.Milliseconds())
	}
	return pipeline.Wrap(pipeline.KindTimeout, CodeBudgetExhausted, msg, e).
		WithDetail("stage", e.Stage).
		WithDetail("dependency", e.Dependency).
		WithDetail("remainingMs", e.Remaining.Milliseconds()).
		WithDetail("allottedMs", e.Allotted.Milliseconds()).
		WithDetail("cut", e.Cut)
}
