package resilience

import (
	"context"
	"sync/atomic"
	"time"
)

// lazyContext is the handler's context of an invocation whose deadline
// needs no timer of the DeadlineMiddleware's own until something waits on
// the context:
//
//   - bound: the parent context ends at the deadline by itself (an
//     adapter's or a caller's context.WithDeadline, grpc-go's server
//     context), so a timer of ours would only duplicate the parent's;
//   - otherwise nothing ends the parent before the deadline, and either
//     the deadline is the kernel-wide cap (a backstop that almost no call
//     reaches) or the parent can never be cancelled (context.Background:
//     there is no cancellation to order against the deadline); the
//     deadline's timer is armed on first use.
//
// lazyContext arms itself — creates the context a plain DeadlineMiddleware
// would have created on arrival: context.WithCancel(parent) when bound,
// context.WithDeadlineCause(parent, deadline, ErrDeadline) otherwise — only
// once something looks at the context's end, and from then on every
// method is that context's:
//
//   - Deadline reports the deadline at once, without arming (outbound
//     clients propagate it);
//   - Done arms;
//   - Err, before anything armed, answers from the parent (and, for the
//     cap, the clock: DeadlineExceeded once the cap has passed), arming
//     only when the answer is not nil; after settle found the chain back
//     before the deadline, from the parent alone;
//   - Value, before anything armed, is the parent's.
//
// A call that ends before anyone waited on its context — the common case
// for a handler that does not block — thus costs one small allocation
// instead of a context, a timer and a cancel function. Observed through
// its methods, a lazyContext behaves as the context it stands for, with
// one exception for the cap that only a handler ignoring its context can
// meet: when the cap has passed and the caller has also gone by the time
// anything looks, the cap wins (TIMEOUT), whichever came first. A bound
// context, or one whose parent cannot be cancelled, has no such
// exception.
//
// When the invocation returns, end cancels the armed context; an unarmed
// one is marked ended, and a later look (a goroutine the handler left
// behind) finds a context canceled with context.Canceled, as after a
// plain cancel.
type lazyContext struct {
	parent   context.Context
	deadline time.Time // with a monotonic reading when not bound
	bound    bool      // parent ends at deadline by itself
	st       atomic.Pointer[armedContext]
}

// armedContext is an armed lazyContext's real context.
type armedContext struct {
	ctx    context.Context
	cancel context.CancelFunc
}

// lazyEnded marks a lazyContext that ended without being armed;
// lazySettled one whose chain returned before its deadline and before
// anything armed it (see settle).
var lazyEnded, lazySettled = new(armedContext), new(armedContext)

// armed reports whether s is a real context rather than a mark.
func armed(s *armedContext) bool { return s != nil && s != lazyEnded && s != lazySettled }

// settle reads the clock once when the chain has returned: if the
// deadline has not passed, the context counts as live from then until
// end, and the looks at it that judge the outcome (the limits' verdict,
// the middleware's attribution) read no clock. Judged as of the chain's
// return, the outcome is the same; the parent is still asked.
func (c *lazyContext) settle() {
	if !c.bound && c.st.Load() == nil && time.Until(c.deadline) > 0 {
		c.st.CompareAndSwap(nil, lazySettled)
	}
}

func (c *lazyContext) Deadline() (time.Time, bool) { return c.deadline, true }

func (c *lazyContext) Done() <-chan struct{} { return c.arm().Done() }

func (c *lazyContext) Err() error {
	s := c.st.Load()
	if s == nil || s == lazySettled {
		if c.parent.Err() == nil && (c.bound || s == lazySettled || time.Until(c.deadline) > 0) {
			return nil
		}
		return c.arm().Err()
	}
	if s == lazyEnded {
		return c.arm().Err()
	}
	return s.ctx.Err()
}

func (c *lazyContext) Value(key any) any {
	if s := c.st.Load(); armed(s) {
		return s.ctx.Value(key)
	}
	return c.parent.Value(key)
}

// arm returns the real context, creating it on first use.
func (c *lazyContext) arm() context.Context {
	for {
		s := c.st.Load()
		if armed(s) {
			return s.ctx
		}
		var a armedContext
		switch {
		case s == lazyEnded:
			// Looked at after the invocation returned: canceled, as a
			// plain context is by the middleware's deferred cancel.
			a.ctx, a.cancel = context.WithCancel(context.WithoutCancel(c.parent))
			a.cancel()
		case c.bound || s == lazySettled:
			// Bound: the parent ends at the deadline. Settled: the chain
			// returned in time, and only end or the parent ends it now.
			a.ctx, a.cancel = context.WithCancel(c.parent)
		case time.Until(c.deadline) <= 0:
			// The deadline has passed: it ended the context, whatever
			// the parent did since (see lazyContext).
			a.ctx, a.cancel = context.WithDeadlineCause(context.WithoutCancel(c.parent), c.deadline, ErrDeadline)
		default:
			a.ctx, a.cancel = context.WithDeadlineCause(c.parent, c.deadline, ErrDeadline)
		}
		if c.st.CompareAndSwap(s, &a) {
			return a.ctx
		}
		a.cancel()
	}
}

// end is the middleware's cancel: the invocation has returned.
func (c *lazyContext) end() {
	for {
		s := c.st.Load()
		if s == lazyEnded {
			return
		}
		if armed(s) {
			s.cancel()
			return
		}
		if c.st.CompareAndSwap(s, lazyEnded) {
			return
		}
	}
}

func (c *lazyContext) String() string { return "resilience.lazyContext" }
