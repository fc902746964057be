package resilience

import "github.com/sundial-go/sundial/pipeline"

// Stage returns the built-in middleware of one operation's Resilience
// stage: dm with the limits l inside it, as one middleware (dm alone when
// l is nil). It behaves exactly as the chain of dm then l, with one
// difference in cost: the breaker, a rate limit without a queue and a
// concurrency limit without a queue decide before the handler's context
// is created, so a call they turn away costs no context and no timer —
// rejections are what an overloaded server does most. A call that must
// wait in a queue gets its context first and waits with it, as in the
// chain. The kernel builds every operation's stage with it.
func Stage(dm *DeadlineMiddleware, l *OperationLimits) pipeline.Middleware {
	if l == nil {
		return dm
	}
	return &stage{dm: dm, l: l}
}

type stage struct {
	dm *DeadlineMiddleware
	l  *OperationLimits
}

func (s *stage) Invoke(inv *pipeline.Invocation, next pipeline.Handler) error {
	return s.dm.invoke(inv, inner{next: next, l: s.l})
}
