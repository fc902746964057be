// Package outclock runs the idle and send-stall clocks of an outbound
// stream, the clocks of a served stream's (resilience/stream), for the
// gRPC client interceptor and the HTTP transport.
package outclock

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/sundial-go/sundial/internal/lazytimer"
	"github.com/sundial-go/sundial/pipeline"
)

// The codes of the clocks, the same wire values as a served stream's.
// An adapter does not import resilience, so they are spelled here; the
// tests hold them equal.
const (
	CodeIdle      = "KERNEL_TIMEOUT_003"
	CodeSendStall = "KERNEL_CANCELLED_002"
)

// The outcomes of the clocks.
var (
	ErrIdle = pipeline.Wrap(pipeline.KindTimeout, CodeIdle,
		"The outbound stream was idle too long.", context.DeadlineExceeded)
	ErrStall = pipeline.Wrap(pipeline.KindCanceled, CodeSendStall,
		"The server did not read the outbound stream in time.", context.Canceled)
)

// Clocks runs the clocks of one outbound stream on one timer, as
// resilience/stream does for a served one. While no send is blocked, the
// timer sleeps until the idle clock: a send that starts brings it forward.
type Clocks struct {
	idle, stall int64 // nanoseconds; 0: off
	cancel      context.CancelCauseFunc

	last      atomic.Int64 // when a message was last sent or received (since base)
	sendSince atomic.Int64 // 1 + when the blocked send started; 0: none

	timer lazytimer.Timer
}

// Start starts the clocks; they end the stream with cancel, whose cause
// is ErrIdle or ErrStall. idle is the longest time without a message sent
// or received, stall the longest one send may block; 0 turns one off.
func Start(idle, stall time.Duration, cancel context.CancelCauseFunc) *Clocks {
	k := &Clocks{idle: int64(max(idle, 0)), stall: int64(max(stall, 0)), cancel: cancel}
	k.timer.Start(time.Now(), (*owner)(k), k.next())
	return k
}

// next returns when the timer looks again (since base). Only a blocked
// send has a stall to watch.
func (k *Clocks) next() int64 {
	at := int64(lazytimer.Never)
	if k.idle > 0 {
		at = k.last.Load() + k.idle
	}
	if since := k.sendSince.Load(); k.stall > 0 && since != 0 {
		at = min(at, since-1+k.stall)
	}
	return at
}

// owner is the timer's view of the clocks.
type owner Clocks

// Expire ends the stream when a clock ran out.
func (o *owner) Expire(now int64) bool {
	k := (*Clocks)(o)
	if since := k.sendSince.Load(); k.stall > 0 && since != 0 && now >= since-1+k.stall {
		k.cancel(ErrStall)
		return true
	}
	if k.idle > 0 && now >= k.last.Load()+k.idle {
		k.cancel(ErrIdle)
		return true
	}
	return false
}

// Next returns when the timer looks again.
func (o *owner) Next(int64) int64 { return (*Clocks)(o).next() }

// Stop stops the timer.
func (k *Clocks) Stop() { k.timer.Stop() }

// Stopped reports whether Stop was called.
func (k *Clocks) Stopped() bool { return k.timer.Stopped() }

// Touch records a message sent or received: the idle clock starts again.
func (k *Clocks) Touch() { k.last.Store(k.timer.Now()) }

// Sending marks a send under way (true) or done.
func (k *Clocks) Sending(on bool) {
	if on {
		since := k.timer.Now() + 1
		k.sendSince.Store(since)
		if k.stall > 0 {
			k.timer.Wake(since - 1 + k.stall)
		}
		return
	}
	k.sendSince.Store(0)
}

// Outcome returns the clock's outcome when a clock ended ctx, else err.
func Outcome(ctx context.Context, err error) error {
	switch cause := context.Cause(ctx); cause {
	case ErrIdle, ErrStall:
		return cause
	}
	return err
}
