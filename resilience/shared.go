package resilience

import (
	"context"
	"errors"
	"time"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience/deadline"
	"github.com/sundial-go/sundial/resilience/internal/limited"
)

// Scope says where an operation's rate and concurrency limits are counted.
type Scope string

const (
	// ScopeProcess counts every limit in this process: N replicas admit N
	// times the configured limits. The default.
	ScopeProcess Scope = "process"
	// ScopeCluster counts the fixed window and the concurrency limit of the
	// operation across every process sharing one store (Redis; see
	// package resilience/cluster). Breakers stay per process.
	ScopeCluster Scope = "cluster"
)

// SharedWindow is a fixed window whose permits are counted outside this
// process. Package resilience/cluster implements it on Redis.
//
// Take admits the call, waiting if its permit is reserved in a later
// window. When the call is turned away, it returns an error matching
// [ErrLimited], with the time until the call could be admitted. When ctx
// ends first, it returns ctx's error, which the caller attributes.
//
// Quota is what the window told the call, for the RateLimit fields. On
// admission its Reset must not overstate how long the admitting window
// lasts from Take's return. The middleware asks again when the call would
// start after it. A window that counts calls by their arrival
// (Invocation.Timing) may count Reset from the arrival instead; a leased
// cluster window does. A Reset of 0 means there is no window edge to
// respect.
type SharedWindow interface {
	Take(ctx context.Context, inv *pipeline.Invocation) (pipeline.Quota, error)
}

// SharedSlots is a concurrency limit whose slots are counted outside this
// process. Acquire returns a release func to call exactly once when the
// call ends. It returns [ErrLimited] when every slot and local queue place
// is taken, and ctx's error when ctx ends first.
type SharedSlots interface {
	Acquire(ctx context.Context, inv *pipeline.Invocation) (release func(), err error)
}

// Option configures [NewLimits] and [Limits.Update].
type Option interface{ apply(*options) }

type options struct {
	window SharedWindow
	slots  SharedSlots
	keyed  SharedKeyedWindow
	custom []Limit
}

type optionFunc func(*options)

func (f optionFunc) apply(o *options) { f(o) }

// WithSharedWindow counts the operation's fixed window in w instead of in
// this process (Policy.Scope cluster). A nil w is a no-op.
func WithSharedWindow(w SharedWindow) Option {
	return optionFunc(func(o *options) {
		if w != nil {
			o.window = w
		}
	})
}

// WithSharedSlots counts the operation's concurrency limit in s instead of
// in this process. A nil s is a no-op.
func WithSharedSlots(s SharedSlots) Option {
	return optionFunc(func(o *options) {
		if s != nil {
			o.slots = s
		}
	})
}

// WithLimit adds a limit of your own after the built-ins, right before
// the handler (the kernel adds those its config names; see
// kernel.WithLimitKind). A nil lim is a no-op.
func WithLimit(lim Limit) Option {
	return optionFunc(func(o *options) {
		if lim != nil {
			o.custom = append(o.custom, lim)
		}
	})
}

// sharedLimit is a window and slots counted outside this process (Scope
// cluster) as one [Limit]: the window, then the slots. A call runs in the
// window that admitted it. The shared window reports how long its window
// lasts from Take's return (Quota.Reset), erring short. It reports 0 when
// it does not say, as a degraded store's local fallback. When the slot
// took longer than that, the permit is left unused and the call asks the
// window again. So no window's calls spill into the next one.
type sharedLimit struct {
	window  SharedWindow // nil: none
	slots   SharedSlots  // nil: none
	headers bool
	retry   time.Duration // the window's length, the retry-after when asking again fails
	l       *Limits
}

func (l *Limits) sharedOf(p Policy, o options) *sharedLimit {
	s := &sharedLimit{headers: p.RateLimitHeaders, retry: p.Window, l: l}
	if p.PermitLimit > 0 {
		s.window = o.window
	}
	if p.ConcurrencyLimit > 0 {
		s.slots = o.slots
	}
	if s.window == nil && s.slots == nil {
		return nil
	}
	return s
}

// maxSharedAttempts bounds how often a call asks a shared window again
// because its slot came after its window had ended.
const maxSharedAttempts = 3

// Acquire implements [Limit].
func (s *sharedLimit) Acquire(ctx context.Context, inv *pipeline.Invocation) (Permit, error) {
	for attempt := 1; ; attempt++ {
		until, err := s.take(ctx, inv)
		if err != nil {
			return Permit{}, err
		}
		var release releaseFunc
		if s.slots != nil {
			rel, err := s.slots.Acquire(ctx, inv)
			if err != nil {
				if e := callerEnd(ctx, err); e != nil {
					return Permit{}, e
				}
				return Permit{}, s.l.concRejection(pipeline.PriorityDefault, nil)
			}
			release = rel
		}
		if until.IsZero() || time.Now().Before(until) {
			if release == nil {
				return Permit{}, nil
			}
			return NewPermit(release), nil
		}
		if release != nil {
			release()
		}
		if attempt == maxSharedAttempts {
			return Permit{}, s.l.rateLimited.get(s.retry)
		}
	}
}

// take takes a permit of the shared window, if there is one. It returns
// until when the permit is good for. Zero means no edge to respect, or no
// slot to wait for before the call runs.
func (s *sharedLimit) take(ctx context.Context, inv *pipeline.Invocation) (until time.Time, err error) {
	if s.window == nil {
		return time.Time{}, nil
	}
	q, werr := s.window.Take(ctx, inv)
	if q.Reset > 0 && s.slots != nil { // without slots the call runs at once
		until = time.Now().Add(q.Reset)
	}
	if s.headers {
		inv.Reply().SetQuota(q)
	}
	if werr == nil {
		return until, nil
	}
	if e := callerEnd(ctx, werr); e != nil {
		return until, e
	}
	retry := s.retry
	if le, ok := werr.(*limited.Error); ok {
		retry = le.RetryAfter
	}
	return until, s.l.rateLimited.get(retry)
}

// releaseFunc is a shared slot's release as a [Releaser].
type releaseFunc func()

// Release implements [Releaser].
func (f releaseFunc) Release(Outcome) { f() }

// callerEnd returns the TIMEOUT or CANCELLED outcome when a shared
// limiter's failure err is the caller's own end, else nil. Either ctx has
// ended, or the limiter saw the deadline pass before ctx's timer fired.
// A shared limiter compares the deadline with the clock, to spend no
// round trip on a call that cannot run. It then returns the context's
// error, and such a call must not be told it was limited.
func callerEnd(ctx context.Context, err error) *pipeline.Error {
	if e := deadline.Attribute(ctx); e != nil {
		return e
	}
	if d, ok := ctx.Deadline(); ok && errors.Is(err, context.DeadlineExceeded) && !time.Now().Before(d) {
		return pipeline.ErrTimeout()
	}
	return nil
}
