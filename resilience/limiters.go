package resilience

import (
	"context"
	"time"

	"github.com/sundial-go/sundial/resilience/internal/limited"
	"github.com/sundial-go/sundial/resilience/internal/limiter"
)

// ErrLimited is returned by the limiters of this package when they turn a
// call away. The window may be used up with its queue full. The call's
// deadline may come before the window it would wait for. Or every
// concurrency slot and queue place may be taken.
var ErrLimited = limited.ErrLimited

// FixedWindow is a fixed-window rate limiter with a FIFO queue. At most
// permitLimit calls are admitted per window. When a window is used up, up
// to queueLimit calls wait for a later one, oldest first. The rest are
// turned away at once with the time until the next window. When a
// waiting call gives up, those behind it move up. A later arrival never
// takes the freed permit ahead of them.
//
// Windows are aligned to the moment the limiter was created and follow
// each other back to back. Unused permits do not carry over. State is
// derived from the clock when a call arrives, so a FixedWindow starts no
// goroutine and costs nothing while idle. It is safe for concurrent use.
//
// Unlike a token bucket (golang.org/x/time/rate), a fixed window hands out
// a whole window's permits as soon as it opens. 2 permits per 60 s means
// two calls now, then none until the minute is over.
type FixedWindow struct{ w *limiter.FixedWindow }

// NewFixedWindow returns a limiter admitting permitLimit calls per window
// of the given length, with up to queueLimit calls waiting for a later
// window. It fails when permitLimit or length is not positive or
// queueLimit is negative.
func NewFixedWindow(permitLimit int, length time.Duration, queueLimit int) (*FixedWindow, error) {
	w, err := limiter.NewFixedWindow(permitLimit, length, queueLimit)
	if err != nil {
		return nil, err
	}
	return &FixedWindow{w}, nil
}

// Allow takes a permit of the current window if one is left. It never
// waits; when it returns false, retryAfter is the time until the next
// window opens. To wait in the queue instead, use Wait.
func (l *FixedWindow) Allow() (ok bool, retryAfter time.Duration) { return l.w.Allow() }

// Wait takes a permit, waiting for a later window if the current one is
// used up and the queue has room. It returns nil when the call may
// proceed.
//
// It returns [ErrLimited] at once, with the time until the next window,
// when the queue is full. It does so too when ctx's deadline comes before
// the window the call would wait for. A call is never queued only to time
// out there. It returns ctx.Err() when ctx is done on arrival or ends
// during the wait. The call's place in the queue is then given back.
func (l *FixedWindow) Wait(ctx context.Context) (retryAfter time.Duration, err error) {
	return l.w.Wait(ctx)
}

// ConcurrencyLimiter bounds the calls executing at once. At most limit
// hold a slot. Up to queueLimit more wait for one, first come first
// served. The rest are turned away at once.
//
// Acquire takes a slot, waiting if need be, and Release gives it back.
// Pair every successful Acquire or TryAcquire with exactly one Release,
// on every exit path (defer it). The uncontended path is a few atomic
// operations. The queue is touched only when every slot is taken. It is
// safe for concurrent use and starts no goroutine. Make one with
// NewConcurrencyLimiter; the zero value turns every call away.
type ConcurrencyLimiter struct{ l limiter.ConcurrencyLimiter }

// NewConcurrencyLimiter returns a limiter of limit slots with up to
// queueLimit calls waiting. It fails when limit is not positive or
// queueLimit is negative.
func NewConcurrencyLimiter(limit, queueLimit int) (*ConcurrencyLimiter, error) {
	c := new(ConcurrencyLimiter)
	if err := c.l.Init(limit, queueLimit); err != nil {
		return nil, err
	}
	return c, nil
}

// TryAcquire takes a free slot if there is one and nobody is waiting for
// one. It never waits. To queue instead, use Acquire.
func (l *ConcurrencyLimiter) TryAcquire() bool { return l.l.TryAcquire() }

// Acquire takes a slot, waiting behind earlier callers when all are taken
// and the queue has room. It returns nil when the caller holds a slot.
//
// It returns [ErrLimited] at once when every slot and queue place is
// taken. It returns ctx.Err() when ctx is done on arrival or ends during
// the wait. The caller then holds nothing, and its queue place is given
// back. A slot handed over just as ctx ended goes to the next waiter.
func (l *ConcurrencyLimiter) Acquire(ctx context.Context) error { return l.l.Acquire(ctx) }

// Release gives a slot back, handing it to the oldest waiter if there is
// one.
func (l *ConcurrencyLimiter) Release() { l.l.Release() }
