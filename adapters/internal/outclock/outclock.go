// Package outclock runs the idle and send-stall clocks of an outbound
// stream, the clocks of a served stream's (resilience/stream), for the
// gRPC client interceptor and the HTTP transport.
package outclock

import (
	"context"
	"math"
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
// resilience/stream does for a served one. While no send is blocked, the
// timer sleeps until the idle clock: a send that starts brings it forward.
type Clocks struct {
	idle, stall time.Duration
	base        time.Time
	cancel      context.CancelCauseFunc

	last      atomic.Int64 // when a message was last sent or received (since base)
	sendSince atomic.Int64 // 1 + when the blocked send started; 0: none

	mu      sync.Mutex
	timer   *time.Timer  // nil until a clock needs it
	armed   atomic.Int64 // when the timer fires (since base); math.MaxInt64: not armed
	stopped bool
}

// Start starts the clocks; they end the stream with cancel, whose cause
// is ErrIdle or ErrStall. idle is the longest time without a message sent
// or received, stall the longest one send may block; 0 turns one off.
func Start(idle, stall time.Duration, cancel context.CancelCauseFunc) *Clocks {
	k := &Clocks{idle: max(idle, 0), stall: max(stall, 0), base: time.Now(), cancel: cancel}
	k.armed.Store(math.MaxInt64)
	if at := k.next(); at != math.MaxInt64 {
		k.mu.Lock()
		k.armed.Store(at)
		k.timer = time.AfterFunc(time.Duration(at), k.fire)
		k.mu.Unlock()
	}
	return k
}

func (k *Clocks) now() int64 { return int64(time.Since(k.base)) }

// next returns when the timer looks again (since base; math.MaxInt64:
// never). Only a blocked send has a stall to watch.
func (k *Clocks) next() int64 {
	at := int64(math.MaxInt64)
	if k.idle > 0 {
		at = k.last.Load() + int64(k.idle)
	}
	if since := k.sendSince.Load(); k.stall > 0 && since != 0 {
		at = min(at, since-1+int64(k.stall))
	}
	return at
}

// arm arms the timer to fire at at, under mu.
func (k *Clocks) arm(at, now int64) {
	k.armed.Store(at)
	d := time.Duration(max(at-now, 0))
	if k.timer == nil {
		k.timer = time.AfterFunc(d, k.fire)
	} else {
		k.timer.Reset(d)
	}
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
	defer k.mu.Unlock()
	// Before next reads sendSince: a send that starts meanwhile sees the
	// timer unarmed, and wakes it.
	k.armed.Store(math.MaxInt64)
	if at := k.next(); !k.stopped && at != math.MaxInt64 {
		k.arm(at, now)
	}
}

// Stop stops the timer.
func (k *Clocks) Stop() {
	k.mu.Lock()
	k.stopped = true
	if k.timer != nil {
		k.timer.Stop()
	}
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
		since := k.now() + 1
		k.sendSince.Store(since)
		if k.stall > 0 {
			k.wake(since - 1 + int64(k.stall))
		}
		return
	}
	k.sendSince.Store(0)
}

// wake makes the timer fire by at, the stall of a send that started.
// It takes mu only when the timer sleeps past at.
func (k *Clocks) wake(at int64) {
	if k.armed.Load() <= at {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.stopped && k.armed.Load() > at {
		k.arm(at, k.now())
	}
}

// Outcome returns the clock's outcome when a clock ended ctx, else err.
func Outcome(ctx context.Context, err error) error {
	switch cause := context.Cause(ctx); cause {
	case ErrIdle, ErrStall:
		return cause
	}
	return err
}
