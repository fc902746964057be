package kernel

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sundial-go/sundial/resilience/deadline"
)

// The states of a guard's answer: armed, then claimed by whoever answers.
const (
	guardArmed   int32 = iota
	guardOutcome       // the chain's outcome is the answer
	guardExpired       // the guard answered without it
)

// guard is the deadline's side of one guarded invocation (Op.Serve, Op.Handle),
// and the context its chain runs under: a context that ends at the
// invocation's deadline, or when its parent (the caller's) ends, or when
// the chain returned. When it ends before the chain returned, the guard
// waits a settle window for the chain's outcome and, failing that,
// answers TIMEOUT or CANCELLED without it.
//
// It is written out rather than made of context.WithDeadline and
// context.AfterFunc, which together cost a dozen allocations per call: it
// is one object with one timer (none when the parent ends at the deadline
// by itself) and one registration on the parent (none when the parent
// cannot end). It implements the context package's AfterFunc method, so
// that contexts derived from it (the handler's) are ended by it without a
// goroutine each.
type guard struct {
	mu         sync.Mutex // guards done, err, funcs, timer, stopParent
	done       chan struct{}
	err        error
	funcs      []*guardFunc
	timer      *time.Timer
	stopParent func() bool

	state atomic.Int32
	// amu is held by claim from its claim until the answer is given; the
	// chain's goroutine, having lost the claim, takes it so that Serve
	// does not return while respond runs.
	amu      sync.Mutex
	answered time.Time // under amu
	sent     error     // under amu

	e          edge
	stragglers *atomic.Int64 // the kernel's count, raised when the guard answers
	respond    func(Outcome) // Serve's; nil: send to result (Handle's)
	result     chan Outcome
}

// answer hands the outcome to whoever waits for it.
func (g *guard) answer(o Outcome) {
	if g.respond != nil {
		g.respond(o)
		return
	}
	g.result <- o
}

// guardFunc is a function registered with AfterFunc.
type guardFunc struct{ f func() }

// arm starts the guard's timer and its registration on the parent, and
// reports whether anything can end the call at all.
func (g *guard) arm() bool {
	parent := g.e.ctx
	d, ok := g.e.inv.Deadline()
	pd, pok := parent.Deadline()
	g.mu.Lock()
	defer g.mu.Unlock()
	if ok && !(pok && pd.Equal(d)) {
		g.timer = time.AfterFunc(time.Until(d), g.onDeadline)
	}
	if parent.Done() != nil {
		g.stopParent = context.AfterFunc(parent, g.onParent)
	}
	return g.timer != nil || g.stopParent != nil
}

// Deadline returns the invocation's deadline (the parent's when it has
// none).
func (g *guard) Deadline() (time.Time, bool) {
	if d, ok := g.e.inv.Deadline(); ok {
		return d, true
	}
	return g.e.ctx.Deadline()
}

// Done returns a channel closed when the guard ends.
func (g *guard) Done() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.done == nil {
		g.done = make(chan struct{})
		if g.err != nil {
			close(g.done)
		}
	}
	return g.done
}

// Err returns nil until the guard ends, then why it ended.
func (g *guard) Err() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.err
}

// Value returns the parent's value for key. context.Cause reads through it,
// so the guard's cause is the parent's: after the guard ended on its own
// deadline, a parent cancelled later makes Cause report the parent's
// cancellation while Err reports DeadlineExceeded (attribution reads Err
// first, so the outcome is still TIMEOUT; see docs/deadlines.md).
func (g *guard) Value(key any) any { return g.e.ctx.Value(key) }

// String names the context, as the context package's own do.
func (g *guard) String() string { return "kernel.guard" }

// AfterFunc arranges for f to run once the guard has ended — in a
// goroutine of its own when it has already ended, else on the goroutine
// that ends it, so f must not block — and stop reports whether it stopped
// f from running. The context package calls it for contexts derived from
// the guard, with a function that cancels the derived context; its
// context.AfterFunc, given the guard, registers one that starts a
// goroutine.
func (g *guard) AfterFunc(f func()) (stop func() bool) {
	g.mu.Lock()
	if g.err != nil {
		g.mu.Unlock()
		go f()
		return func() bool { return false }
	}
	gf := &guardFunc{f: f}
	g.funcs = append(g.funcs, gf)
	g.mu.Unlock()
	return func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		for i, x := range g.funcs {
			if x == gf {
				g.funcs = append(g.funcs[:i], g.funcs[i+1:]...)
				return true
			}
		}
		return false
	}
}

// cancel ends the guard with err, once, and reports whether this call
// ended it.
func (g *guard) cancel(err error) bool {
	g.mu.Lock()
	if g.err != nil {
		g.mu.Unlock()
		return false
	}
	g.err = err
	if g.done != nil {
		close(g.done)
	}
	funcs, t, stop := g.funcs, g.timer, g.stopParent
	g.funcs = nil
	g.mu.Unlock()
	if t != nil {
		t.Stop()
	}
	if stop != nil {
		stop()
	}
	// Called here rather than each in a goroutine of its own: the context
	// package registers the cancellation of a derived context (quick, and
	// safe to call here), and context.AfterFunc starts its own goroutine;
	// a handler waiting on its context learns of the end without a
	// scheduling hop that would race the settle window.
	for _, gf := range funcs {
		gf.f()
	}
	return true
}

// onDeadline runs when the invocation's deadline passes.
func (g *guard) onDeadline() {
	if g.cancel(context.DeadlineExceeded) {
		g.expire()
	}
}

// onParent runs when the caller's context ends: its error (and cause, read
// through Value) is the guard's.
func (g *guard) onParent() {
	if g.cancel(g.e.ctx.Err()) {
		g.expire()
	}
}

// expire runs when the guard ended before the chain returned: it arms a
// timer for the settle window, after which claim answers unless the
// chain's outcome came in the meantime.
func (g *guard) expire() {
	if g.state.Load() == guardArmed {
		time.AfterFunc(settleWindow, g.claim) // only ever after the deadline or the caller's end: no timer on the common path
	}
}

// claim answers TIMEOUT or CANCELLED — decided as the DeadlineMiddleware
// decides it (deadline.Attribute) — and ends the observation, unless
// the chain's outcome was claimed first.
func (g *guard) claim() {
	g.amu.Lock()
	defer g.amu.Unlock()
	if !g.state.CompareAndSwap(guardArmed, guardExpired) {
		return
	}
	g.answered = time.Now()
	g.stragglers.Add(1) // the chain runs on without its caller; serve lowers it
	g.e.strag.Add(1)
	g.sent = deadline.Attribute(g)
	o := g.e.end(nil, g.sent, g.answered)
	o.Expired = true
	g.answer(o)
}
