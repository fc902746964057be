// Package outclock runs the idle and send-stall clocks of an outbound
// stream, the clocks of a served stream's (resilience/stream), for the
// gRPC client interceptor and the HTTP transport.
package outclock

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

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
// resilience/stream does for a served one.
type Clocks struct {
	idle, stall time.Duration
	base        time.Time
	cancel      context.CancelCauseFunc

	last      atomic.Int64 // when a message was last sent or received (since base)
	sendSince atomic.Int64 // 1 + when the blocked send started; 0: none

	mu      sync.Mutex
	timer   *time.Timer
	stopped bool
}

// Start starts the clocks; they end the stream with cancel, whose cause
// is ErrIdle or ErrStall. idle is the longest time without a message sent
// or received, stall the longest one send may block; 0 turns one off.
func Start(idle, stall time.Duration, cancel context.CancelCauseFunc) *Clocks {
	k := &Clocks{idle: max(idle, 0), stall: max(stall, 0), base: time.Now(), cancel: cancel}
	k.mu.Lock()
	k.timer = time.AfterFunc(k.next(0), k.fire)
	k.mu.Unlock()
	return k
}

func (k *Clocks) now() int64 { return int64(time.Since(k.base)) }

// next returns how long after now the timer looks again.
func (k *Clocks) next(now int64) time.Duration {
	d := time.Duration(1<<62 - 1)
	if k.idle > 0 {
		d = min(d, time.Duration(k.last.Load()+int64(k.idle)-now))
	}
	if k.stall > 0 {
		if since := k.sendSince.Load(); since != 0 {
			d = min(d, time.Duration(since-1+int64(k.stall)-now))
		} else {
			d = min(d, k.stall)
		}
	}
	return max(d, time.Nanosecond)
}

// fire ends the stream when a clock ran out, else looks again later.
func (k *Clocks) fire() {
	now := k.now()
	if since := k.sendSince.Load(); k.stall > 0 && since != 0 && now >= since-1+int64(k.stall) {
		k.cancel(ErrStall)
		return
	}
	if k.idle > 0 && now >= k.last.Load()+int64(k.idle) {
		k.cancel(ErrIdle)
		return
	}
	k.mu.Lock()
	if !k.stopped {
		k.timer.Reset(k.next(now))
	}
	k.mu.Unlock()
}

// Stop stops the timer.
func (k *Clocks) Stop() {
	k.mu.Lock()
	k.stopped = true
	k.timer.Stop()
	k.mu.Unlock()
}

// Stopped reports whether Stop was called.
func (k *Clocks) Stopped() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.stopped
}

// Touch records a message sent or received: the idle clock starts again.
func (k *Clocks) Touch() { k.last.Store(k.now()) }

// Sending marks a send under way (true) or done.
func (k *Clocks) Sending(on bool) {
	if on {
		k.sendSince.Store(k.now() + 1)
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
