// Package streamctx makes a served stream's parent context. Only the
// caller leaving ends it, never the transport's own end of the request.
package streamctx

import "context"

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
