package grpcadapter

import (
	"context"
	"io"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
)

// This file serves one call of a streaming operation. Its stream.Raw is
// grpc-go's ServerStream, and the kernel runs the call (kernel.Op.Stream).
//
// The call runs on a goroutine of its own. grpc-go's goroutine waits for
// its answer, and returns it as the status. A clock or bound that ends
// the stream aborts it. grpc-go's goroutine then answers at once with the
// stream's outcome. Only that ends grpc-go's stream: a Send blocked on
// flow control, or a Recv waiting for the caller, then returns. grpc-go
// has no other way to unblock them.

// The states of a served stream: open, then answered once its status is
// decided. Its ServerStream is then no longer used.
const (
	streamOpen int32 = iota
	streamAnswered
)

// serverStream is one served stream: the transport's side of the
// kernel's stream (stream.Raw).
type serverStream struct {
	m      *method
	ss     grpc.ServerStream
	ctx    context.Context    // ss's
	caller context.Context    // the invocation's parent: ends when the caller leaves
	call   *kernel.StreamCall // until run starts
	stop   func()             // releases caller
	start  time.Time

	state atomic.Int32
	// answer gets the status error of the call's answer, once: from the
	// state's winner (claim).
	answer chan error

	expired    chan struct{} // closed when expire has run (server streams)
	expiredErr error         // the request's outcome, when expire answered

	meta *operations.Metadata // the call's (operations.MetadataFrom), from prepare
	sent atomic.Bool          // a message was sent: so were the headers
}

// handleStream is the grpc.StreamDesc handler of a streaming operation.
func (m *method) handleStream(_ any, ss grpc.ServerStream) error {
	ctx := ss.Context()
	if ctx.Err() == context.Canceled {
		// Reset before its handler started: as for a unary call.
		m.a.canceled.Add(ctx, true)
		return status.Error(codes.Canceled, context.Canceled.Error())
	}
	s := &serverStream{m: m, ss: ss, ctx: ctx, start: time.Now(), answer: make(chan error, 1)}
	c := &kernel.StreamCall{Raw: s}
	if m.Desc.Kind() == operations.ServerStream {
		s.expired = make(chan struct{})
		c.Decode = s.decode
	}
	s.caller, s.stop = m.a.inbound(ctx)
	s.call = c
	go s.run()
	select {
	case err := <-s.answer:
		return err
	case <-ctx.Done():
		// The caller left, or its deadline passed: grpc-go has reset the
		// stream, and no answer reaches the caller. The kernel's outcome
		// is logged when the call returns.
		if s.claim() {
			return status.FromContextError(ctx.Err()).Err()
		}
		return <-s.answer
	}
}

// claim reports whether the caller wins the right to answer the call.
func (s *serverStream) claim() bool { return s.state.CompareAndSwap(streamOpen, streamAnswered) }

// run runs the call through the kernel, and answers it with its outcome
// unless the stream was answered already. The call's goroutine parks in
// the handler: run's frame, under it, holds little (see finish).
func (s *serverStream) run() {
	c := s.call
	s.call = nil           // the kernel copies it
	parent := s.prepare(c) // before *c is read: it fills in c.Caller
	s.finish(s.m.Op.Stream(parent, *c))
}

// prepare returns the invocation's parent context, with the trace context,
// baggage and metadata of the request, and fills in c's caller. It runs on
// the call's goroutine: reading the metadata takes over 2 KiB of stack,
// and grpc-go's goroutine, which then only waits for the answer, keeps
// the stack it started with. Its frame is gone once it returns.
//
//go:noinline
func (s *serverStream) prepare(c *kernel.StreamCall) context.Context {
	parent := s.m.a.prepare(s.ctx, s.caller, s.m.Full, s.m.Desc.ID, &c.Caller)
	parent, s.meta = withMetadata(s.ctx, parent)
	return parent
}

// finish answers the call with its outcome o unless the stream was
// answered already. Apart from run, its frame is not on the stack while
// the stream is open: the call's goroutine stays small.
//
//go:noinline
func (s *serverStream) finish(o kernel.Outcome) {
	s.stop()
	if !s.claim() {
		s.m.a.logCall(s.ctx, s.m.Full, o, Status(o.Err, s.m.a.cfg.rpc.Domain), s.start)
		return
	}
	sendMetadata(s.ctx, s.meta)
	if o.Err == nil && s.m.Desc.Kind() == operations.ClientStream {
		// A client stream's reply.
		var msg *dynamicpb.Message
		if msg, o.Err = s.m.EncodeOutput(o.Output); o.Err == nil {
			_ = s.ss.SendMsg(msg) // a failure: grpc-go has answered
		}
	}
	s.answer <- s.m.a.answer(s.ctx, s.m.Full, o, s.start)
}

// Send sends one of the handler's outputs.
func (s *serverStream) Send(v any) error {
	if s.state.Load() != streamOpen {
		return s.failed(errAnswered)
	}
	msg, err := s.m.EncodeOutput(v)
	if err != nil {
		return err
	}
	if !s.sent.Swap(true) {
		if md := outgoing(s.meta.SendHeader()); md != nil {
			_ = s.ss.SetHeader(md)
		}
	}
	if err := s.ss.SendMsg(msg); err != nil {
		return s.failed(err)
	}
	return nil
}

// Recv receives one of the caller's messages as the operation's input
// type, and its size in bytes.
func (s *serverStream) Recv() (any, int, error) {
	if s.state.Load() != streamOpen {
		return nil, 0, s.failed(errAnswered)
	}
	msg := dynamicpb.NewMessage(s.m.Input())
	if err := decodeRequest(s.ss.RecvMsg, msg); err != nil {
		if err == io.EOF {
			return nil, 0, io.EOF
		}
		return nil, 0, s.failed(err)
	}
	in, err := s.m.ConvertInput(msg)
	if err != nil {
		return nil, 0, err
	}
	return in, proto.Size(msg), nil
}

// Abort answers the call with the stream's outcome cause. That ends
// grpc-go's stream, and a blocked Send or Recv returns.
func (s *serverStream) Abort(cause error) {
	if s.claim() {
		s.answer <- Status(cause, s.m.a.cfg.rpc.Domain).Err()
	}
}

// failed returns err, the error of a Send or Recv, once the caller's end
// is known: when grpc-go's stream has ended, the kernel then sees the
// caller leave rather than a transport failure.
func (s *serverStream) failed(err error) error {
	if s.ctx.Err() != nil {
		<-s.caller.Done()
	}
	return err
}

// decode reads a server stream's request message (kernel.StreamCall's
// Decode). It waits WithRecvTimeout for it, as for a unary call, or until
// deadline (zero: none) when that is earlier.
func (s *serverStream) decode(deadline time.Time) (any, error) {
	wait, stall := s.m.a.recvWait(), true
	if !deadline.IsZero() {
		if until := time.Until(deadline); wait <= 0 || until < wait {
			wait, stall = max(until, time.Nanosecond), false
		}
	}
	var t *time.Timer
	if wait > 0 {
		t = time.AfterFunc(wait, func() { s.expire(stall) })
	} else {
		close(s.expired)
	}
	msg := dynamicpb.NewMessage(s.m.Input())
	err := decodeRequest(s.ss.RecvMsg, msg)
	if t != nil && !t.Stop() {
		<-s.expired
		if s.expiredErr != nil {
			return nil, s.expiredErr
		}
	}
	if err != nil {
		if status.Code(err) == codes.Canceled && s.ctx.Err() == context.Canceled {
			s.m.a.canceled.Add(s.ctx, true)
		}
		return nil, fromHandler(s.failed(err))
	}
	return s.m.DecodeInput(msg)
}

// expire answers a server stream whose request message did not arrive in
// time: by WithRecvTimeout (stall), or by the stream's deadline. A stall
// is charged to the connection, as for a unary call (see unreceived).
func (s *serverStream) expire(stall bool) {
	defer close(s.expired)
	if !s.claim() {
		return
	}
	s.expiredErr = pipeline.ErrTimeout()
	if stall && (s.ctx.Err() == context.Canceled || chargeStall(s.ctx)) {
		s.m.a.canceled.Add(s.ctx, true)
		s.answer <- status.Error(codes.Unavailable, "grpcadapter: connection closed by the listener's guard")
		return
	}
	s.answer <- Status(s.expiredErr, s.m.a.cfg.rpc.Domain).Err()
}
