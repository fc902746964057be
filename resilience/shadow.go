package resilience

import (
	"sync/atomic"

	"github.com/sundial-go/sundial/pipeline"
)

// tally counts the rejections of the built-in limits by limit.
type tally struct{ rate, conc, breaker, shed atomic.Int64 }

// add counts err when it is the rejection of a built-in limit (by its
// code), and reports whether it is one.
func (t *tally) add(err error) bool {
	e, ok := err.(*pipeline.Error)
	if !ok {
		return false
	}
	switch e.Code() {
	case CodeRateLimited:
		t.rate.Add(1)
	case CodeConcurrencyLimited:
		t.conc.Add(1)
	case CodeCircuitOpen:
		t.breaker.Add(1)
	case CodeShed:
		t.shed.Add(1)
	default:
		return false
	}
	return true
}

func (t *tally) snapshot() Rejections {
	return Rejections{Rate: t.rate.Load(), Concurrency: t.conc.Load(), Breaker: t.breaker.Load(), Shed: t.shed.Load()}
}

// passes counts err, the error limit i of chain c turned a call away
// with, and reports whether the call proceeds all the same. In shadow
// mode (Policy.Shadow) a built-in limit's rejection is counted in
// Shadowed, and the call runs without that limit's permit. A caller's end
// (TIMEOUT, CANCELLED) and the rejections of limits of your own are never
// passed.
func (l *Limits) passes(c *chain, i int, err error) bool {
	if i >= c.builtins {
		return false
	}
	if c.policy.Shadow {
		return l.shadowed.add(err)
	}
	l.rejected.add(err)
	return false
}
