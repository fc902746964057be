package deadlinectx

import (
	"context"
	"sync/atomic"
	"time"
)

// Lazy is the handler's context of a call whose deadline needs no timer
// until something waits on the context. It stands for the context a plain
// deadline middleware would create on arrival. Deadline answers at once.
// Done arms it: it creates that context. Err arms it only when the answer
// is not nil. When the call returns, End cancels it. The rules for when a
// call may run under a Lazy are in docs/deadlines.md.
type Lazy struct {
	// Implementation notes.
	//
	// A Lazy serves two cases. Bound: the parent ends at the deadline by
	// itself (an adapter's or a caller's context.WithDeadline, grpc-go's
	// server context), so a timer of ours would only duplicate the
	// parent's. Otherwise nothing ends the parent before the deadline, and
	// either the deadline is the kernel-wide cap (a backstop that almost no
	// call reaches) or the parent can never be cancelled (there is no
	// cancellation to order against the deadline); the timer is armed on
	// first use.
	//
	// Arming creates context.WithCancel(parent) when bound, and
	// context.WithDeadlineCause(parent, deadline, ErrDeadline) otherwise.
	// From then on every method is that context's. Before arming, Err
	// answers from the parent (and, for the cap, the clock), and Value is
	// the parent's. After Settle found the chain back before the deadline,
	// Err answers from the parent alone.
	//
	// Observed through its methods, a Lazy behaves as the context it stands
	// for, with one exception for the cap that only a handler ignoring its
	// context can meet: when the cap has passed and the caller has also
	// gone by the time anything looks, the cap wins (TIMEOUT), whichever
	// came first. A bound context, or one whose parent cannot be
	// cancelled, has no such exception.
	//
	// End cancels an armed context; an unarmed one is marked ended, and a
	// later look (a goroutine the handler left behind) finds a context
	// canceled with context.Canceled, as after a plain cancel.

	parent   context.Context
	deadline time.Time // with a monotonic reading when not bound
	bound    bool      // parent ends at deadline by itself
	st       atomic.Pointer[armedContext]
}

// armedContext is an armed Lazy's real context.
type armedContext struct {
	ctx    context.Context
	cancel context.CancelFunc
}

// lazyEnded marks a Lazy that ended without being armed;
// lazySettled one whose chain returned before its deadline and before
// anything armed it (see Settle).
var lazyEnded, lazySettled = new(armedContext), new(armedContext)

// armed reports whether s is a real context rather than a mark.
func armed(s *armedContext) bool { return s != nil && s != lazyEnded && s != lazySettled }

// Settle reads the clock once when the chain has returned. If the
// deadline has not passed, the context counts as live from then until
// End. The looks that judge the outcome then read no clock; the parent is
// still asked.
func (c *Lazy) Settle() {
	if !c.bound && c.st.Load() == nil && time.Until(c.deadline) > 0 {
		c.st.CompareAndSwap(nil, lazySettled)
	}
}

func (c *Lazy) Deadline() (time.Time, bool) { return c.deadline, true }

func (c *Lazy) Done() <-chan struct{} { return c.arm().Done() }

func (c *Lazy) Err() error {
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

func (c *Lazy) Value(key any) any {
	if s := c.st.Load(); armed(s) {
		return s.ctx.Value(key)
	}
	return c.parent.Value(key)
}

// arm returns the real context, creating it on first use.
func (c *Lazy) arm() context.Context {
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
			// the parent did since (see Lazy).
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

// End is the middleware's cancel: the invocation has returned.
func (c *Lazy) End() {
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

func (c *Lazy) String() string { return "deadline.Lazy" }
