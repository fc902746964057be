package grpcadapter

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/sundial-go/sundial/pipeline"
)

// WithStreamClocks returns a call option that gives an outbound stream
// two clocks of a served stream's, with StreamClientInterceptor
// installed. idle ends the stream when no message was sent or received
// for it: TIMEOUT, KERNEL_TIMEOUT_003. sendStall ends it when one SendMsg
// is blocked for it, the server not reading: CANCELLED,
// KERNEL_CANCELLED_002. Either ends the stream's context, so a blocked
// SendMsg or RecvMsg returns the outcome. 0 turns a clock off.
func WithStreamClocks(idle, sendStall time.Duration) grpc.CallOption {
	return streamClocks{idle: max(idle, 0), stall: max(sendStall, 0)}
}

type streamClocks struct {
	grpc.EmptyCallOption
	idle, stall time.Duration
}

// clocksFor returns the last WithStreamClocks among opts.
func clocksFor(opts []grpc.CallOption) (streamClocks, bool) {
	var c streamClocks
	found := false
	for _, o := range opts {
		if sc, ok := o.(streamClocks); ok {
			c, found = sc, true
		}
	}
	return c, found && (c.idle > 0 || c.stall > 0)
}

// outboundClocks runs the clocks of one outbound stream on one timer, as
// resilience/stream does for a served one.
type outboundClocks struct {
	c      streamClocks
	base   time.Time
	cancel context.CancelCauseFunc

	last      atomic.Int64 // when a message was last sent or received (since base)
	sendSince atomic.Int64 // 1 + when the blocked SendMsg started; 0: none

	mu      sync.Mutex
	timer   *time.Timer
	stopped bool
}

// startClocks starts c's clocks; they end the stream with cancel.
func startClocks(c streamClocks, cancel context.CancelCauseFunc) *outboundClocks {
	k := &outboundClocks{c: c, base: time.Now(), cancel: cancel}
	k.mu.Lock()
	k.timer = time.AfterFunc(k.next(0), k.fire)
	k.mu.Unlock()
	return k
}

func (k *outboundClocks) now() int64 { return int64(time.Since(k.base)) }

// next returns how long after now the timer looks again.
func (k *outboundClocks) next(now int64) time.Duration {
	d := time.Duration(1<<62 - 1)
	if k.c.idle > 0 {
		d = min(d, time.Duration(k.last.Load()+int64(k.c.idle)-now))
	}
	if k.c.stall > 0 {
		if since := k.sendSince.Load(); since != 0 {
			d = min(d, time.Duration(since-1+int64(k.c.stall)-now))
		} else {
			d = min(d, k.c.stall)
		}
	}
	return max(d, time.Nanosecond)
}

// fire ends the stream when a clock ran out, else looks again later.
func (k *outboundClocks) fire() {
	now := k.now()
	if since := k.sendSince.Load(); k.c.stall > 0 && since != 0 && now >= since-1+int64(k.c.stall) {
		k.cancel(errOutboundStall)
		return
	}
	if k.c.idle > 0 && now >= k.last.Load()+int64(k.c.idle) {
		k.cancel(errOutboundIdle)
		return
	}
	k.mu.Lock()
	if !k.stopped {
		k.timer.Reset(k.next(now))
	}
	k.mu.Unlock()
}

// stop stops the timer.
func (k *outboundClocks) stop() {
	k.mu.Lock()
	k.stopped = true
	k.timer.Stop()
	k.mu.Unlock()
}

// sending marks a SendMsg under way (true) or done.
func (k *outboundClocks) sending(on bool) {
	if on {
		k.sendSince.Store(k.now() + 1)
		return
	}
	k.sendSince.Store(0)
}

// clockOutcome returns the clock's outcome when a clock ended ctx, else err.
func clockOutcome(ctx context.Context, err error) error {
	switch cause := context.Cause(ctx); cause {
	case errOutboundIdle, errOutboundStall:
		return cause
	}
	return err
}

// The codes of the clocks, the same wire values as a served stream's
// (TestOutboundClockCodes holds them equal). An adapter does not import
// resilience, so they are spelled here.
const (
	codeStreamIdle      = "KERNEL_TIMEOUT_003"
	codeStreamSendStall = "KERNEL_CANCELLED_002"
)

var (
	errOutboundIdle = pipeline.Wrap(pipeline.KindTimeout, codeStreamIdle,
		"The outbound stream was idle too long.", context.DeadlineExceeded)
	errOutboundStall = pipeline.Wrap(pipeline.KindCanceled, codeStreamSendStall,
		"The server did not read the outbound stream in time.", context.Canceled)
)
