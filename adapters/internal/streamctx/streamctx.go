// Package streamctx makes a served stream's parent context. Only the
// caller leaving ends it, never the transport's own end of the request.
package streamctx

import (
	"context"
	"time"
)

// Follow returns a context with ctx's values and deadline. It ends when
// ctx ends, unless ended reports true by then. A server ends a request's
// context when a write fails. A transport's Abort makes a blocked write
// fail. That is the stream's own end, not the caller leaving. Call stop
// when the stream has ended.
func Follow(ctx context.Context, ended func() bool) (_ context.Context, stop func()) {
	base, cancelDeadline := context.WithoutCancel(ctx), context.CancelFunc(func() {})
	if d, ok := ctx.Deadline(); ok {
		base, cancelDeadline = context.WithDeadline(base, d)
	}
	cctx, cancel := context.WithCancelCause(base)
	after := context.AfterFunc(ctx, func() {
		if !ended() {
			cancel(context.Cause(ctx))
		}
	})
	return cctx, func() { after(); cancel(nil); cancelDeadline() }
}

// resetGrace bounds AwaitEnd's wait. net/http ends the request's context
// right after it fails the body with the reset: the wait is brief.
const resetGrace = time.Second

// AwaitEnd waits for ctx, the caller's context, to end, for at most
// resetGrace. Call it when a read or write failed with what looks like
// the caller's reset. net/http's HTTP/2 server fails the request body
// with a reset before it cancels the request's context. After the wait,
// the kernel sees the caller leave, not a transport failure. The bound
// keeps an error that only looks like a reset from holding the stream.
func AwaitEnd(ctx context.Context) {
	if ctx.Err() != nil {
		return
	}
	t := time.NewTimer(resetGrace)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
