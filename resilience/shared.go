package resilience

import (
	"context"
	"fmt"
	"time"

	"github.com/sundial-go/sundial/pipeline"
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

// Valid reports whether s is a known scope ("" counts as process).
func (s Scope) Valid() bool { return s == "" || s == ScopeProcess || s == ScopeCluster }

// SharedWindow is a fixed window whose permits are counted outside this
// process (package resilience/cluster implements it on Redis). Take
// admits the call, waiting if its permit is reserved in a later window;
// it returns a *LimitedError when the call is turned away, and ctx's
// error, attributed by the caller, when ctx ends first. Quota is what
// the window told the call, for the RateLimit fields; on admission its
// Reset must not overstate how long the admitting window lasts from
// Take's return (the middleware asks again when the call would start
// after it); 0 means the admission has no window edge to respect.
type SharedWindow interface {
	Take(ctx context.Context, inv *pipeline.Invocation) (Quota, error)
}

// SharedSlots is a concurrency limit whose slots are counted outside this
// process. Acquire returns a release func to call exactly once when the
// call ends; it returns [ErrLimited] when every slot and local queue place
// is taken, and ctx's error when ctx ends first.
type SharedSlots interface {
	Acquire(ctx context.Context, inv *pipeline.Invocation) (release func(), err error)
}

// Quota is [pipeline.Quota]: what a rate limit told a call about its
// window.
type Quota = pipeline.Quota

// LimitedError is a rate limit's rejection with the time until the call
// could be admitted and what the window looked like. It matches
// [ErrLimited] with errors.Is.
type LimitedError struct {
	RetryAfter time.Duration
	Quota      Quota
}

func (e *LimitedError) Error() string {
	return fmt.Sprintf("resilience: limit reached; retry after %v", e.RetryAfter)
}

// Unwrap returns ErrLimited.
func (e *LimitedError) Unwrap() error { return ErrLimited }

// Option configures NewResilienceMiddleware.
type Option interface{ apply(*limitSet) }

type optionFunc func(*limitSet)

func (f optionFunc) apply(l *limitSet) { f(l) }

// WithSharedWindow counts the operation's fixed window in w instead of in
// this process (Policy.Scope cluster). A nil w is a no-op.
func WithSharedWindow(w SharedWindow) Option {
	return optionFunc(func(l *limitSet) {
		if w != nil {
			l.sharedWindow = w
		}
	})
}

// WithSharedSlots counts the operation's concurrency limit in s instead of
// in this process. A nil s is a no-op.
func WithSharedSlots(s SharedSlots) Option {
	return optionFunc(func(l *limitSet) {
		if s != nil {
			l.sharedSlots = s
		}
	})
}
