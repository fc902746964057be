// Package stream bounds one streaming call in time and size.
//
// [Open] wraps a transport's [Raw] stream. The [Stream] it returns gives
// the handler a context, and Send and Recv methods that enforce its
// clocks and bounds. The stream deadline ends it with TIMEOUT,
// KERNEL_TIMEOUT_001, as for a unary call. The idle timeout, reset by each
// message sent or received, ends it with [CodeIdle]. A Send blocked too
// long ends it with [CodeSendStall]. The caller leaving ends it with
// CANCELLED, KERNEL_CANCELLED_001. [Config] also bounds the rate, count
// and bytes of the caller's messages.
//
// Each end has a [Reason] for logs and metrics, and a [resilience.Verdict]
// for the circuit breaker. One timer per stream serves every clock. It is
// armed lazily: a message stores a timestamp, and the timer, when it
// fires, arms itself again for the next instant that can end the stream.
// An idle stream's timer sleeps until its nearest clock; a Send that
// starts blocking brings the timer forward to its stall. The package
// starts no goroutine of its own.
//
// The package knows nothing of HTTP, gRPC or the CLI.
package stream

import (
	"context"
	"errors"
	"io"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience"
	"github.com/sundial-go/sundial/resilience/deadline"
)

// The codes of the stream's own ends. KERNEL_TIMEOUT_001 and
// KERNEL_CANCELLED_001 keep their unary meaning: the deadline fired, the
// caller left.
const (
	// CodeIdle: no message was sent or received for Config.Idle.
	CodeIdle = "KERNEL_TIMEOUT_003"
	// CodeSendStall: a Send was blocked for Config.SendStall.
	CodeSendStall = "KERNEL_CANCELLED_002"
	// CodeRate: the caller sent faster than Config.MessagesPerSecond.
	CodeRate = "KERNEL_UNAVAILABLE_011"
	// CodeDrained: the server ended the stream; the caller may reconnect.
	CodeDrained = "KERNEL_UNAVAILABLE_012"
	// CodeTransport: the transport failed while the caller was still there.
	CodeTransport = "KERNEL_UNAVAILABLE_013"
	// CodeTooManyMessages: the caller sent more than Config.MaxMessages.
	CodeTooManyMessages = "KERNEL_VALIDATION_010"
	// CodeTooManyBytes: the caller sent more than Config.MaxBytes.
	CodeTooManyBytes = "KERNEL_VALIDATION_011"
)

// DetailSilent is the detail of a [CodeIdle] outcome naming the side that
// went silent: "handler" or "caller".
const DetailSilent = "silent"

// Kind is who sends messages on a stream.
type Kind uint8

// The kinds of stream.
const (
	// Bidi: both sides send. It is the zero Kind.
	Bidi Kind = iota
	// Server: the caller sends one request, the handler a stream of messages.
	Server
	// Client: the caller sends a stream of messages, the handler one reply.
	Client
)

// Reason is why a stream ended.
type Reason uint8

// The reasons. EndNone means the stream has not ended.
const (
	EndNone Reason = iota
	// EndCompleted: the handler returned.
	EndCompleted
	// EndDeadline: the stream deadline passed.
	EndDeadline
	// EndIdle: no message for Config.Idle.
	EndIdle
	// EndSlowConsumer: a Send was blocked for Config.SendStall.
	EndSlowConsumer
	// EndCallerLeft: the caller cancelled.
	EndCallerLeft
	// EndDrained: [Stream.Drain] ended the stream.
	EndDrained
	// EndLimit: the caller passed a rate, message or byte bound, or sent
	// a message Config.Check refused.
	EndLimit
	// EndTransport: the transport failed while the caller was there.
	EndTransport
)

var reasonNames = [...]string{
	EndNone: "none", EndCompleted: "completed", EndDeadline: "deadline", EndIdle: "idle",
	EndSlowConsumer: "slow_consumer", EndCallerLeft: "caller_left", EndDrained: "drained",
	EndLimit: "limit", EndTransport: "transport",
}

// String returns the reason's name, as logs and metrics label it.
func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return "unknown"
}

// Raw is a transport's stream. Send and Recv block. One goroutine may call
// Send while another calls Recv; neither is called by two at once.
type Raw interface {
	// Send sends one message.
	Send(m any) error
	// Recv receives one message and its size in bytes. It returns io.EOF
	// when the caller has sent its last message. A *pipeline.Error refuses
	// a message, one that does not decode, say: it ends the stream
	// (EndLimit) as the outcome.
	Recv() (m any, size int, err error)
	// Abort makes blocked and later Send and Recv calls return. It is
	// called at most once, from any goroutine, when a clock or bound ends
	// the stream; cause is the stream's outcome.
	Abort(cause error)
}

// Config bounds one stream. The zero value bounds nothing.
type Config struct {
	// Kind says who sends; it decides who was silent when Idle fires.
	Kind Kind
	// Deadline ends the stream with TIMEOUT. Zero: none.
	Deadline time.Time
	// DeadlineSource says whose deadline Deadline is. A deadline that
	// fires is a failure for the breaker when it is the operation's or
	// the kernel's, and neutral when it is the caller's.
	DeadlineSource pipeline.DeadlineSource
	// Idle ends the stream when no message was sent or received for it.
	Idle time.Duration
	// SendStall ends the stream when one Send is blocked for it.
	SendStall time.Duration
	// MessagesPerSecond bounds the caller's messages. Recv waits for the
	// next message's turn, so the transport's flow control pushes back.
	MessagesPerSecond float64
	// HardRate ends the stream instead, when the caller sends more than
	// one second's worth of messages ahead of the rate.
	HardRate bool
	// MaxMessages bounds the messages the caller may send.
	MaxMessages int64
	// MaxBytes bounds the bytes the caller may send, as Raw.Recv counts.
	MaxBytes int64
	// Check, when not nil, checks each message the caller sends. Its
	// error ends the stream (EndLimit) and is the outcome.
	Check func(m any) error
	// Heartbeat is the period of heartbeats, when Raw has a method
	// Heartbeat() error: see [Open].
	Heartbeat time.Duration
	// MaxAge drains the stream (EndDrained) once it is open for MaxAge,
	// with a retry-after of one second.
	MaxAge time.Duration
}

// Result is how a stream ended, for logs, spans, metrics and the breaker.
type Result struct {
	// Reason is why the stream ended.
	Reason Reason
	// Err is the stream's outcome: nil on success.
	Err error
	// Verdict is what the end says of the operation's health. For
	// EndCompleted it is Neutral: judge the handler's outcome as a unary
	// call's ([resilience.VerdictOf]).
	Verdict resilience.Verdict
	// Sent and Received count the messages; Bytes the bytes received.
	Sent, Received, Bytes int64
}

// ended is a stream's end, set once.
type ended struct {
	reason  Reason
	err     error
	verdict resilience.Verdict
	// aborting is done once the end's transport is aborted. Close waits
	// for it: a transport aborted after Close returned would fail the
	// outcome the adapter writes then.
	aborting sync.WaitGroup
}

// detached is a stream's parent as the stream's context sees it: its
// deadline and values, not its end. The stream ends its context itself
// when the parent ends (Open's watch), as for any other end. So the
// context's cause is always the stream's outcome, even when the caller
// leaves just as a clock fires.
type detached struct{ context.Context }

func (*detached) Done() <-chan struct{} { return nil }
func (*detached) Err() error            { return nil }

// Stream is one open stream. Create it with [Open]; end it with Close.
type Stream struct {
	raw     Raw
	parent  detached // the caller's context, as ctx's parent
	ctx     context.Context
	cancel  context.CancelCauseFunc
	unwatch func() bool // stops the watch of parent's end; nil: none
	cfg     Config
	base    time.Time // the clock's origin: stored times are nanoseconds since base

	deadline, idle, stall int64 // nanoseconds; 0: none
	interval              int64 // nanoseconds between the caller's messages; 0: no rate
	maxAge, beat          int64 // nanoseconds; 0: none

	beater   heartbeater    // raw's heartbeat; nil: none
	lastBeat atomic.Int64   // when a heartbeat last completed
	beats    sync.WaitGroup // the heartbeat in flight

	lastSend  atomic.Int64 // when a Send last completed
	lastRecv  atomic.Int64 // when a Recv last returned a message
	sendSince atomic.Int64 // 1 + when the blocked Send started; 0: none
	end       atomic.Pointer[ended]

	sent, received, bytes atomic.Int64

	tat   int64       // the rate's next turn (Recv's goroutine only)
	pacer *time.Timer // Recv's wait for its turn (Recv's goroutine only)

	tmu     sync.Mutex // orders the timer's re-arming with Close
	timer   *time.Timer
	armed   atomic.Int64 // when the timer fires; math.MaxInt64: not armed, or being re-armed
	closing bool         // Close started: no new heartbeat
	closed  bool
	beating bool // a heartbeat is in flight (under tmu)
	// recvDone is set when Recv returned io.EOF. The small fields are
	// together: a Stream lives as long as its call.
	recvDone atomic.Bool
}

// heartbeater is a Raw that sends heartbeats.
type heartbeater interface{ Heartbeat() error }

// maxAgeRetryAfter is the retry-after of a stream drained at its maximum
// age: the caller may reconnect at once, to any replica.
const maxAgeRetryAfter = time.Second

// Open returns a stream bounded by cfg over raw, whose context derives
// from parent. The caller leaving is parent ending. Call Close when the
// handler returns.
//
// When raw has a method Heartbeat() error and cfg.Heartbeat is set, the
// stream's timer calls it once nothing was sent for cfg.Heartbeat. It
// calls it on a goroutine of its own, never while a Send is blocked, so
// raw must serialise it with Send. Abort must unblock it. A heartbeat
// never resets the idle clock. A heartbeat blocked for SendStall ends the
// stream as a blocked Send does. A heartbeat's error is a transport
// failure. Close waits for a heartbeat in flight.
func Open(parent context.Context, raw Raw, cfg Config) *Stream {
	s := &Stream{raw: raw, parent: detached{parent}, cfg: cfg, base: time.Now()}
	s.ctx, s.cancel = context.WithCancelCause(&s.parent)
	s.idle, s.stall = int64(max(cfg.Idle, 0)), int64(max(cfg.SendStall, 0))
	s.maxAge = int64(max(cfg.MaxAge, 0))
	if b, ok := raw.(heartbeater); ok && cfg.Heartbeat > 0 {
		s.beater, s.beat = b, int64(cfg.Heartbeat)
	}
	if !cfg.Deadline.IsZero() {
		s.deadline = max(int64(cfg.Deadline.Sub(s.base)), 0)
		if s.deadline == 0 {
			s.finish(EndDeadline, pipeline.ErrTimeout(), deadline.ErrDeadline)
			return s
		}
	}
	if r := cfg.MessagesPerSecond; r > 0 && !math.IsInf(r, 1) {
		s.interval = max(int64(float64(time.Second)/r), 1)
	}
	s.unwatch = context.AfterFunc(parent, s.parentEnded)
	s.armed.Store(math.MaxInt64)
	if next := s.next(0); next != math.MaxInt64 {
		s.tmu.Lock() // fire re-arms s.timer under tmu
		s.armed.Store(next)
		s.timer = time.AfterFunc(time.Duration(next), s.fire)
		s.tmu.Unlock()
	}
	return s
}

// Context returns the handler's context. It ends when the stream ends,
// with the outcome as its cause.
func (s *Stream) Context() context.Context { return s.ctx }

// now returns the time since the stream opened, in nanoseconds.
func (s *Stream) now() int64 { return int64(time.Since(s.base)) }

// next returns the next instant after now at which a clock may end the
// stream or a heartbeat is due (math.MaxInt64: none). It is called under
// tmu, or before the timer exists. Only a blocked Send has a stall to
// watch: a Send that starts later brings the timer forward (see wake).
func (s *Stream) next(now int64) int64 {
	next := int64(math.MaxInt64)
	if s.deadline > 0 {
		next = s.deadline
	}
	if s.idle > 0 {
		next = min(next, max(s.lastSend.Load(), s.lastRecv.Load())+s.idle)
	}
	if s.stall > 0 {
		if since := s.sendSince.Load(); since != 0 {
			next = min(next, since-1+s.stall)
		}
	}
	if s.maxAge > 0 {
		next = min(next, s.maxAge)
	}
	if s.beat > 0 {
		// A heartbeat in flight, or one a blocked Send put off: look
		// again a period later.
		b := s.nextBeat()
		if s.beating || b <= now {
			b = now + s.beat
		}
		next = min(next, b)
	}
	return next
}

// nextBeat returns when the next heartbeat is due: a period after the
// last message sent or heartbeat.
func (s *Stream) nextBeat() int64 {
	return max(s.lastSend.Load(), s.lastBeat.Load()) + s.beat
}

// heartbeat sends one heartbeat, which started at since (1 + its start,
// as sendSince holds it).
func (s *Stream) heartbeat(since int64) {
	defer s.beats.Done()
	err := s.beater.Heartbeat()
	s.sendSince.CompareAndSwap(since, 0)
	s.lastBeat.Store(s.now())
	s.tmu.Lock()
	s.beating = false
	s.tmu.Unlock()
	if err != nil {
		s.failed(err)
	}
}

// fire runs when the timer fires: it ends the stream when a clock has
// run out, and otherwise arms the timer for the next instant.
func (s *Stream) fire() {
	if s.end.Load() != nil {
		return
	}
	now := s.now()
	switch {
	case s.deadline > 0 && now >= s.deadline:
		s.finish(EndDeadline, pipeline.ErrTimeout(), deadline.ErrDeadline)
		return
	case s.stall > 0 && stalled(s.sendSince.Load(), now, s.stall):
		s.finish(EndSlowConsumer, errSendStall, errSendStall)
		return
	case s.idle > 0 && now >= max(s.lastSend.Load(), s.lastRecv.Load())+s.idle:
		err := errIdleCaller
		if s.handlerExpected() {
			err = errIdleHandler
		}
		s.finish(EndIdle, err, err)
		return
	case s.maxAge > 0 && now >= s.maxAge:
		s.Drain(maxAgeRetryAfter)
		return
	}
	s.tmu.Lock()
	defer s.tmu.Unlock()
	// Before next reads sendSince: a Send that starts meanwhile sees
	// the timer unarmed, and wakes it.
	s.armed.Store(math.MaxInt64)
	if s.beat > 0 && !s.beating && !s.closing && now >= s.nextBeat() {
		// Not while a Send is blocked: the caller is not reading it.
		if since := now + 1; s.sendSince.CompareAndSwap(0, since) {
			s.beating = true
			s.beats.Add(1)
			go s.heartbeat(since)
		}
	}
	if next := s.next(now); !s.closed && next != math.MaxInt64 {
		s.armed.Store(next)
		s.timer.Reset(time.Duration(next - now))
	}
}

// wake makes the timer fire by at, the stall of a Send that started
// blocking. It takes tmu only when the timer sleeps past at.
func (s *Stream) wake(at int64) {
	if s.armed.Load() <= at {
		return
	}
	s.tmu.Lock()
	defer s.tmu.Unlock()
	if s.closed || s.armed.Load() <= at {
		return
	}
	s.armed.Store(at)
	d := time.Duration(max(at-s.now(), 0))
	if s.timer == nil {
		s.timer = time.AfterFunc(d, s.fire)
	} else {
		s.timer.Reset(d)
	}
}

// stalled reports whether a Send blocked since since (1 + its start; 0:
// none) has stalled at now.
func stalled(since, now, stall int64) bool { return since != 0 && now >= since-1+stall }

// handlerExpected reports whether the handler, not the caller, was the
// side expected to send when the idle timeout fired. A blocked Send means
// the caller is not reading. Otherwise it depends on the kind. On a server
// stream, the handler is expected. On a client stream, the caller is,
// until it sent its last message. On a bidi stream, the side that did not
// send the last message is: the caller before any message, the handler
// once the caller sent its last.
func (s *Stream) handlerExpected() bool {
	if s.sendSince.Load() != 0 {
		return false
	}
	switch s.cfg.Kind {
	case Server:
		return true
	case Client:
		return s.recvDone.Load()
	}
	return s.recvDone.Load() || s.lastRecv.Load() > s.lastSend.Load()
}

// finish ends the stream with reason and outcome err, unless it has ended
// already, and returns its end. cause is the context's cause.
func (s *Stream) finish(reason Reason, err, cause error) *ended {
	e := &ended{reason: reason, err: err, verdict: resilience.Neutral}
	switch reason {
	case EndDeadline:
		e.verdict = s.deadlineVerdict()
	case EndIdle:
		if err == errIdleHandler {
			e.verdict = resilience.Failure
		}
	}
	e.aborting.Add(1) // before e is seen: Close waits for it
	if !s.end.CompareAndSwap(nil, e) {
		return s.end.Load()
	}
	s.cancel(cause)
	if reason != EndCompleted && reason != EndCallerLeft {
		s.raw.Abort(err)
	}
	e.aborting.Done()
	return e
}

// deadlineVerdict judges a stream its deadline ended, as for a unary call.
func (s *Stream) deadlineVerdict() resilience.Verdict {
	switch s.cfg.DeadlineSource {
	case pipeline.DeadlineOperation, pipeline.DeadlineKernel:
		return resilience.Failure
	}
	return resilience.Neutral
}

// parentEnded ends the stream once its parent ended, unless it has ended
// already.
func (s *Stream) parentEnded() { s.settle() }

// settle returns the stream's end: its own, or the caller's when parent
// has ended; nil while the stream is open. The caller's end gives the
// stream's context the parent's cause.
func (s *Stream) settle() *ended {
	if e := s.end.Load(); e != nil {
		return e
	}
	caller := s.parent.Context
	if caller.Err() == nil {
		return nil
	}
	if err := deadline.Attribute(caller); err.Kind() == pipeline.KindTimeout {
		return s.finish(EndDeadline, err, context.Cause(caller))
	}
	return s.finish(EndCallerLeft, pipeline.ErrCanceled(), context.Cause(caller))
}

// failed returns the error for a raw Send or Recv that returned err: the
// stream's end when it has ended (a transport's error after Abort, or the
// caller's leaving), else a transport failure. A transport's error is
// never taken for the caller's cancel. A VALIDATION *pipeline.Error is
// the transport refusing a message the caller sent: it ends the stream
// as Check does.
func (s *Stream) failed(err error) error {
	if e := s.settle(); e != nil {
		return e.err
	}
	if pe, ok := err.(*pipeline.Error); ok && pe.Kind() == pipeline.KindValidation {
		// The transport refused the caller's message, as Check does.
		return s.finish(EndLimit, pe, pe).err
	}
	out := pipeline.Wrap(pipeline.KindUnavailable, CodeTransport, "The stream's transport failed.", err)
	return s.finish(EndTransport, out, out).err
}

// check returns the stream's outcome once its context has ended.
func (s *Stream) check() error {
	select {
	case <-s.ctx.Done():
		return s.settle().err
	default:
		return nil
	}
}

// Send sends one message. It returns the stream's outcome once the stream
// has ended; the handler should return it.
func (s *Stream) Send(m any) error {
	if err := s.check(); err != nil {
		return err
	}
	if s.stall > 0 {
		since := s.now() + 1
		s.sendSince.Store(since)
		s.wake(since - 1 + s.stall)
	}
	err := s.raw.Send(m)
	now := s.now()
	if s.stall > 0 {
		s.sendSince.Store(0)
	}
	if err != nil {
		return s.failed(err)
	}
	s.lastSend.Store(now)
	s.sent.Add(1)
	return nil
}

// Recv receives one of the caller's messages. It returns io.EOF after the
// caller's last message, and the stream's outcome once the stream has
// ended.
func (s *Stream) Recv() (any, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if s.interval > 0 && !s.cfg.HardRate {
		if err := s.wait(); err != nil {
			return nil, err
		}
	}
	m, n, err := s.raw.Recv()
	if err != nil {
		if err == io.EOF && s.settle() == nil {
			s.recvDone.Store(true)
			return nil, io.EOF
		}
		if pe, ok := err.(*pipeline.Error); ok && s.settle() == nil {
			return nil, s.finish(EndLimit, pe, pe).err
		}
		return nil, s.failed(err)
	}
	now := s.now()
	s.lastRecv.Store(now)
	count, total := s.received.Add(1), s.bytes.Add(int64(n))
	if err := s.bound(now, count, total); err != nil {
		return nil, s.finish(EndLimit, err, err).err
	}
	if s.cfg.Check != nil {
		if err := s.cfg.Check(m); err != nil {
			return nil, s.finish(EndLimit, err, err).err
		}
	}
	return m, nil
}

// wait waits for the next message's turn at the configured rate.
func (s *Stream) wait() error {
	now := s.now()
	turn := max(s.tat, now)
	s.tat = turn + s.interval
	if turn == now {
		return nil
	}
	d := time.Duration(turn - now)
	if s.pacer == nil {
		s.pacer = time.NewTimer(d)
	} else {
		s.pacer.Reset(d)
	}
	select {
	case <-s.pacer.C:
		return nil
	case <-s.ctx.Done():
		return s.settle().err
	}
}

// bound checks the caller's message count, bytes and, under HardRate,
// rate after a message arrived at now.
func (s *Stream) bound(now, count, total int64) error {
	switch {
	case s.cfg.MaxMessages > 0 && count > s.cfg.MaxMessages:
		return pipeline.NewError(pipeline.KindValidation, CodeTooManyMessages,
			"The stream carried more messages than allowed.").WithDetail("max", s.cfg.MaxMessages)
	case s.cfg.MaxBytes > 0 && total > s.cfg.MaxBytes:
		return pipeline.NewError(pipeline.KindValidation, CodeTooManyBytes,
			"The stream carried more bytes than allowed.").WithDetail("max", s.cfg.MaxBytes)
	case s.interval > 0 && s.cfg.HardRate:
		// At most one second's messages ahead of the rate.
		turn := max(s.tat, now)
		if ahead := turn - now - (int64(time.Second) - s.interval); ahead > 0 {
			return errRate.WithRetryAfter(time.Duration(ahead))
		}
		s.tat = turn + s.interval
	}
	return nil
}

// Drain ends the stream with UNAVAILABLE, [CodeDrained], telling the
// caller to reconnect after retryAfter. The server calls it when the
// stream reaches its maximum age, or at shutdown.
func (s *Stream) Drain(retryAfter time.Duration) {
	err := errDrained.WithRetryAfter(retryAfter)
	s.finish(EndDrained, err, err)
}

// Reason returns why the stream ended, EndNone while it is open.
func (s *Stream) Reason() Reason {
	if e := s.settle(); e != nil {
		return e.reason
	}
	return EndNone
}

// Close ends the stream after the handler returned err, stops its timer,
// and returns how the stream ended. A clock, a bound, a drain or the
// caller that ended the stream first decides the outcome; err is then its
// cause. Call Close once Send and Recv have returned. It returns the same
// Result when called again.
func (s *Stream) Close(err error) Result {
	s.tmu.Lock()
	s.closing = true
	s.tmu.Unlock()
	s.beats.Wait() // the timer still runs: a stalled heartbeat ends the stream
	s.tmu.Lock()
	s.closed = true
	if s.timer != nil {
		s.timer.Stop()
	}
	s.tmu.Unlock()
	if s.pacer != nil {
		s.pacer.Stop()
	}
	e := s.settle()
	if e == nil {
		e = s.finish(EndCompleted, err, context.Canceled)
	}
	e.aborting.Wait() // a clock that ended the stream may be aborting it still
	if s.unwatch != nil {
		s.unwatch()
	}
	s.cancel(context.Canceled)
	r := Result{Reason: e.reason, Err: e.err, Verdict: e.verdict,
		Sent: s.sent.Load(), Received: s.received.Load(), Bytes: s.bytes.Load()}
	if e.reason != EndCompleted && err != nil && err != e.err {
		if pe, ok := errors.AsType[*pipeline.Error](e.err); ok && !errors.Is(err, e.err) {
			r.Err = withCause(pe, err)
		}
	}
	return r
}

// withCause returns a copy of e, details and retry-after included, that
// wraps cause: the handler's own error stays visible to logs.
func withCause(e *pipeline.Error, cause error) *pipeline.Error {
	c := pipeline.Wrap(e.Kind(), e.Code(), e.Message(), cause)
	for k, v := range e.Details() {
		c = c.WithDetail(k, v)
	}
	if d, ok := e.RetryAfter(); ok {
		c = c.WithRetryAfter(d)
	}
	return c
}

var (
	errIdleHandler = pipeline.Wrap(pipeline.KindTimeout, CodeIdle,
		"The stream was idle too long.", context.DeadlineExceeded).WithDetail(DetailSilent, "handler")
	errIdleCaller = pipeline.Wrap(pipeline.KindTimeout, CodeIdle,
		"The stream was idle too long.", context.DeadlineExceeded).WithDetail(DetailSilent, "caller")
	errSendStall = pipeline.Wrap(pipeline.KindCanceled, CodeSendStall,
		"The caller did not read the stream in time.", context.Canceled)
	errRate = pipeline.NewError(pipeline.KindUnavailable, CodeRate,
		"The stream's messages came faster than allowed.")
	errDrained = pipeline.NewError(pipeline.KindUnavailable, CodeDrained,
		"The server ended the stream; reconnect.")
)
