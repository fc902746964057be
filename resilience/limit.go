package resilience

import (
	"context"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience/internal/breaker"
)

// Limit is one limit of an operation: its circuit breaker, its fixed
// window, its concurrency limit, or one of your own. An operation's
// [Limits] runs its limits in order around the handler. Each admits the
// call or turns it away; an admitted call holds a [Permit] of each until
// it ends, and gives them back, last first, with its [Outcome].
//
// Acquire admits the call, waiting in a queue of the limit's own at most
// until ctx ends. It returns the call's permit, or the error the caller
// gets. A rejection is an UNAVAILABLE *pipeline.Error with a retry-after
// (see [RateLimited]). When ctx ends first, the error is the caller's own
// end, deadline.Attribute(ctx). ctx is the handler's context, bounded by
// the invocation's deadline. A Limit is safe for concurrent use.
//
// A Limit may also have a method
//
//	TryAcquire(inv *pipeline.Invocation) (p Permit, wait bool, err error)
//
// that can often decide on the call's arrival, before the handler's
// context exists. A rejection then costs no context and no timer.
// TryAcquire returns the permit or the rejection when it decides at once.
// It returns wait true when the call has to wait; the call then gets
// Acquire, with its context. Limits runs its leading limits with
// TryAcquire this way, up to the first that says wait.
type Limit interface {
	Acquire(ctx context.Context, inv *pipeline.Invocation) (Permit, error)
}

// admitter is a [Limit] with TryAcquire (see Limit).
type admitter interface {
	Limit
	TryAcquire(inv *pipeline.Invocation) (p Permit, wait bool, err error)
}

// Releaser takes back the permits its limit handed out: Release is called
// exactly once per permit, with how the call ended.
type Releaser interface {
	Release(o Outcome)
}

// tokenReleaser is the Releaser of a built-in limit, which tells its
// permits apart by a token.
type tokenReleaser interface {
	release(token uint64, o Outcome)
}

// Permit is what an admitted call holds of one [Limit] until it ends. The
// zero Permit holds nothing and needs no release.
type Permit struct {
	// r is a custom limit's Releaser or a built-in's tokenReleaser. One
	// field keeps Permit within four words, so that it stays in registers.
	r     any
	token uint64 // a built-in's
	watch bool
}

// NewPermit returns a permit that r takes back.
func NewPermit(r Releaser) Permit { return Permit{r: r} }

// newTokenPermit returns a built-in's permit that r takes back with token.
func newTokenPermit(r tokenReleaser, token uint64) Permit { return Permit{r: r, token: token} }

// held reports whether p has a releaser to give it back to.
func (p Permit) held() bool { return p.r != nil }

// release gives p back with the call's outcome o. The built-ins come
// first: their calls are direct.
func (p Permit) release(o Outcome) {
	switch r := p.r.(type) {
	case *breakerLimit:
		r.release(p.token, o)
	case *slotsLimit:
		r.release(p.token, o)
	case tokenReleaser:
		r.release(p.token, o)
	case Releaser:
		r.Release(o)
	}
}

// ReleasedAtContextEnd returns p, given back when the call's context ends
// if its handler has not returned by then. A handler that ignores its
// context must not hold such a permit past its deadline. A circuit
// breaker's probe is one: its slot keeps every other call out. The
// Outcome is then judged by how the context ended. The call returns only
// after the permit is given back.
func (p Permit) ReleasedAtContextEnd() Permit {
	p.watch = true
	return p
}

// Verdict is what an ended call says about the operation's health, the
// one judgement every limit shares (the rules are in docs/pipeline.md,
// "Circuit breaker").
type Verdict uint8

// The verdicts.
const (
	// Success: the operation worked.
	Success Verdict = Verdict(breaker.Success)
	// Failure: the operation failed or did not finish in its own time.
	Failure Verdict = Verdict(breaker.Failure)
	// Neutral: the call says nothing of the operation's health (it did not
	// run, the caller left or was at fault, its outcome was replayed).
	Neutral Verdict = Verdict(breaker.Neutral)
)

// Outcome is how a call ended, as its limits see it.
type Outcome struct {
	// Err is the call's outcome: nil on success.
	Err error
	// Verdict is what the outcome says about the operation's health.
	Verdict Verdict
	// Ran reports whether the handler ran (false: a later limit turned the
	// call away, or its caller left while it waited).
	Ran bool
	// TimedOut reports whether the call was ended by its operation's own
	// deadline: its TimeoutSeconds or the kernel-wide cap, not its
	// caller's. The operation did not finish in its own time.
	TimedOut bool
}
