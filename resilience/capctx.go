package resilience

import (
	"context"
	"sync/atomic"
	"time"
)

// capContext is the handler's context of an invocation whose effective
// deadline is the kernel-wide cap (MaxTimeout): the caller sent none (or a
// later one) and the operation has no Timeout of its own. Such a deadline
// is a backstop that almost no call reaches, so capContext arms the timer
// that ends the context only once something looks at the context's end:
//
//   - Deadline reports the cap at once, without arming (outbound clients
//     propagate it);
//   - Done arms: it creates the context.WithDeadlineCause(parent, cap,
//     ErrDeadline) that a plain DeadlineMiddleware would have created on
//     arrival, and from then on every method is that context's;
//   - Err, before anything armed, answers from the parent and the clock —
//     the parent's end, DeadlineExceeded once the cap has passed, else nil
//     — arming only when the answer is not nil;
//   - Value, before anything armed, is the parent's.
//
// A call that ends before anyone waited on its context — the common case
// for a handler that does not block — thus costs one small allocation
// instead of a context, a timer and a cancel function. Observed through
// its methods, a capContext behaves as the context it stands for, with one
// exception that only a handler ignoring its context can meet: when the
// cap has passed and the caller has also gone by the time anything looks,
// the cap wins (TIMEOUT), whichever came first.
//
// When the invocation returns, end cancels the armed context; an unarmed
// one is marked ended, and a later look (a goroutine the handler left
// behind) finds a context cancelled with context.Canceled, as after a
// plain cancel.
type capContext struct {
	parent   context.Context
	deadline time.Time // carries a monotonic reading
	st       atomic.Pointer[armedContext]
}

// armedContext is an armed capContext's real context.
type armedContext struct {
	ctx    context.Context
	cancel context.CancelFunc
}

// capEnded marks a capContext that ended without being armed.
var capEnded = new(armedContext)

func newCapContext(parent context.Context, deadline time.Time) *capContext {
	return &capContext{parent: parent, deadline: deadline}
}

func (c *capContext) Deadline() (time.Time, bool) { return c.deadline, true }

func (c *capContext) Done() <-chan struct{} { return c.arm().Done() }

func (c *capContext) Err() error {
	s := c.st.Load()
	if s == nil {
		if c.parent.Err() == nil && time.Until(c.deadline) > 0 {
			return nil
		}
		return c.arm().Err()
	}
	if s == capEnded {
		return c.arm().Err()
	}
	return s.ctx.Err()
}

func (c *capContext) Value(key any) any {
	if s := c.st.Load(); s != nil && s != capEnded {
		return s.ctx.Value(key)
	}
	return c.parent.Value(key)
}

// arm returns the real context, creating it on first use.
func (c *capContext) arm() context.Context {
	for {
		s := c.st.Load()
		if s != nil && s != capEnded {
			return s.ctx
		}
		var a armedContext
		switch {
		case s == capEnded:
			// Looked at after the invocation returned: cancelled, as a
			// plain context is by the middleware's deferred cancel.
			a.ctx, a.cancel = context.WithCancel(context.WithoutCancel(c.parent))
			a.cancel()
		case time.Until(c.deadline) <= 0:
			// The cap has passed: it ended the context, whatever the
			// parent did since (see capContext).
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
func (c *capContext) end() {
	for {
		s := c.st.Load()
		if s == capEnded {
			return
		}
		if s != nil {
			s.cancel()
			return
		}
		if c.st.CompareAndSwap(nil, capEnded) {
			return
		}
	}
}

func (c *capContext) String() string { return "resilience.capContext" }
