package pipelinetest

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/sundial-go/sundial/pipeline"
)

// Handler returns a handler that returns out and err, whatever it is given.
func Handler(out any, err error) pipeline.Handler {
	return func(context.Context, *pipeline.Invocation) (any, error) { return out, err }
}

// Call is what a [Recorder] saw of one call.
type Call struct {
	// Context is the context the call received.
	Context context.Context
	// Invocation is the invocation the call received.
	Invocation *pipeline.Invocation
	// Deadline is the context's deadline on entry; HasDeadline reports
	// whether it had one.
	Deadline    time.Time
	HasDeadline bool
	// ContextErr is the context's Err on entry: non-nil when the context
	// had already ended.
	ContextErr error
	// Returned reports whether the rest of the chain has returned; it is
	// false while the call runs and after it panicked.
	Returned bool
	// Result and Err are what the rest of the chain returned.
	Result any
	Err    error
}

// Recorder is a [pipeline.Middleware] that records every call that goes
// through it, then passes it on unchanged. Put it where you want to look:
// last in the chain, it sees what the handler is given and returns.
//
// The zero Recorder is ready to use. Its methods are safe for concurrent
// use.
type Recorder struct {
	mu    sync.Mutex
	calls []Call
	gen   uint64 // incremented by Reset
}

// Invoke records the call, calls next with ctx and inv, records and returns
// what next returned.
func (r *Recorder) Invoke(ctx context.Context, inv *pipeline.Invocation, next pipeline.Handler) (any, error) {
	c := Call{Context: ctx, Invocation: inv, ContextErr: ctx.Err()}
	c.Deadline, c.HasDeadline = ctx.Deadline()
	r.mu.Lock()
	i, gen := len(r.calls), r.gen
	r.calls = append(r.calls, c)
	r.mu.Unlock()

	out, err := next(ctx, inv)

	r.mu.Lock()
	if r.gen == gen { // not Reset meanwhile
		r.calls[i].Returned, r.calls[i].Result, r.calls[i].Err = true, out, err
	}
	r.mu.Unlock()
	return out, err
}

// Calls returns a copy of the calls recorded so far, in the order they
// entered the Recorder.
func (r *Recorder) Calls() []Call {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

// Last returns the call that entered the Recorder last, and whether there
// was one.
func (r *Recorder) Last() (Call, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.calls) == 0 {
		return Call{}, false
	}
	return r.calls[len(r.calls)-1], true
}

// Reset forgets the calls recorded so far.
func (r *Recorder) Reset() {
	r.mu.Lock()
	r.calls = nil
	r.gen++
	r.mu.Unlock()
}
