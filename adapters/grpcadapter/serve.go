package grpcadapter

import (
	"context"
	"errors"
	"math/rand/v2"
	"reflect"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/dynamicpb"

	"fmt"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
)

// This file serves one unary call: it receives the request, converts it
// to the operation's input and its result to the response.

// handle is the grpc.MethodDesc handler of one operation. Without an
// interceptor, or with only the adapter's own (which passes the adapter's
// methods straight through), the whole call is handed to one receiver
// goroutine (see serve). With others, the request is received first, then
// the interceptors run on grpc-go's goroutine and the chain on another
// (kernel.Op.Handle), so that they see the answer the deadline gives.
func (m *method) handle(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
	if ctx.Err() == context.Canceled {
		// The client reset the stream before its handler started, as a
		// rapid-reset client does call after call: no one is left to
		// answer, and nothing is read or started for it.
		m.a.canceled.Add(ctx, true)
		return nil, status.Error(codes.Canceled, context.Canceled.Error())
	}
	if icpt == nil || isOwnUnary(icpt) {
		return m.serve(ctx, dec)
	}
	req := dynamicpb.NewMessage(m.Input())
	if err := m.a.receive(dec, req); err != nil {
		return nil, m.unreceived(ctx, err)
	}
	info := &grpc.UnaryServerInfo{Server: srv, FullMethod: m.Full}
	return icpt(ctx, req, info, func(ctx context.Context, req any) (any, error) {
		msg, ok := req.(*dynamicpb.Message)
		if !ok {
			return nil, m.reject(ctx, pipeline.NewError(pipeline.KindUnexpected, pipeline.CodeUnexpected,
				fmt.Sprintf("grpcadapter: an interceptor replaced the request of %s with %T", m.Full, req)))
		}
		return m.call(ctx, msg)
	})
}

// ownUnary is the code of the interceptors UnaryServerInterceptor
// returns, whatever their adapter.
var ownUnary = reflect.ValueOf((*Adapter)(nil).UnaryServerInterceptor()).Pointer()

// isOwnUnary reports whether icpt is an interceptor UnaryServerInterceptor
// returned: the only one on the server, since grpc-go chains two or more
// into a function of its own. For an adapter's method it calls the handler
// and returns its result, nothing else, so skipping it changes nothing.
// UnaryServerInterceptor is not inlined: an inlined copy would compile the
// function it returns anew at the call site, with code of its own.
func isOwnUnary(icpt grpc.UnaryServerInterceptor) bool {
	return reflect.ValueOf(icpt).Pointer() == ownUnary
}

// unreceived answers a call whose request message could not be read: err
// is errRecvTimeout or the decoder's.
func (m *method) unreceived(ctx context.Context, err error) error {
	if err == errRecvTimeout {
		// The message did not arrive within WithRecvTimeout: the answer
		// closes the stream, which ends the read. The connection is
		// charged for it (see Bounds.ServerOptions); once the guard closes
		// it (or the stream has ended anyway), its calls end with it,
		// unanswered.
		if ctx.Err() == context.Canceled || chargeStall(ctx) {
			m.a.canceled.Add(ctx, true)
			return status.Error(codes.Unavailable, "grpcadapter: connection closed by the listener's guard")
		}
		return m.reject(ctx, pipeline.ErrTimeout())
	}
	if status.Code(err) == codes.Canceled && ctx.Err() == context.Canceled {
		// The client reset the stream (or its connection ended) before
		// the message: no one is left to answer, and no invocation ran.
		// It is counted, not logged one by one (see rpccall.Canceled).
		m.a.canceled.Add(ctx, true)
		return err
	}
	// A request that is not valid protobuf is answered with the decoder's
	// own status (grpc-go's Internal, or InvalidArgument for a decoder
	// panic).
	return m.reject(ctx, fromHandler(err))
}

// reject answers a call the adapter turns away before the pipeline with
// the status of outcome, which the kernel observes as a rejection.
func (m *method) reject(ctx context.Context, outcome error) error {
	start := time.Now()
	parent, stop := m.a.inbound(ctx)
	defer stop()
	var c kernel.Caller
	parent = m.a.prepare(ctx, parent, m.Full, m.Desc.ID, &c)
	return m.a.answer(ctx, m.Full, m.Op.Reject(parent, c, outcome), start)
}

// errRecvTimeout reports a request message that did not arrive within
// WithRecvTimeout.
var errRecvTimeout = errors.New("grpcadapter: request message not received in time")

// serve runs one call with a single hand-off. A receiver goroutine reads
// the request message and then runs the call itself, under the kernel's
// guard (kernel.Op.Serve). grpc-go's goroutine waits for the answer. The
// guard answers by the invocation's deadline whatever the handler does. It
// answers from its own goroutine when the chain is late, so the answer
// never waits for a straggler.
//
// The chain must not run on grpc-go's goroutine. grpc-go counts a call
// against MaxConcurrentStreams until its handler returns. Past the bound,
// its connection reader waits for one to return. Stragglers would then
// hold their connection, with answered calls and pings unread
// (TestStragglersDoNotHoldTheConnection). GracefulStop would wait for
// them too. docs/performance.md gives the cost of the hand-off.
//
// WithRecvTimeout bounds the read alone. When its timer fires before the
// message was read, the call is answered DeadlineExceeded at once (see
// unreceived). A message that arrives later is dropped. Once the message
// was read, the timer is stopped and plays no part.
func (m *method) serve(ctx context.Context, dec func(any) error) (any, error) {
	a := m.a
	r := a.reception()
	r.dec, r.req, r.m, r.ctx = dec, dynamicpb.NewMessage(m.Input()), m, ctx
	r.state.Store(receptionReading)
	r.refs.Store(2) // this goroutine's and the receiver's
	if d := a.recvWait(); d > 0 {
		if r.timer == nil {
			r.timer = time.AfterFunc(d, r.expire)
		} else {
			r.timer.Reset(d)
		}
	}
	a.handOff(r)
	growStack(0) // while the receiver reads
	err := <-r.done
	resp := r.resp // set before done was sent
	r.release()
	if err != nil {
		if err == errRecvTimeout {
			return nil, m.unreceived(ctx, err)
		}
		return nil, err
	}
	return resp, nil
}

// reception returns a reception for serve: a pooled one, or a new one.
// Pooled, a reception keeps its channel, its timer and its respond
// function: four allocations a call does not make.
func (a *Adapter) reception() *reception {
	if r, ok := a.receptions.Get().(*reception); ok {
		return r
	}
	r := &reception{done: make(chan error, 1)}
	r.respondFn = r.respond
	return r
}

// release lets go of serve's reception, on serve's side or the receiver's.
// The last to let go pools it when it can be reused. That is when its
// timer was stopped before it fired, or it has none. Then done is empty,
// and no expire can still run for the call that used it.
func (r *reception) release() {
	if r.refs.Add(-1) != 0 || !r.reusable {
		return
	}
	a := r.m.a
	r.dec, r.req, r.m, r.ctx, r.resp, r.meta, r.reusable = nil, nil, nil, nil, nil, nil, false
	a.receptions.Put(r)
}

// growStack grows the stack of grpc-go's goroutine for the call while it
// holds few frames. grpc-go runs each call on a new goroutine, whose stack
// starts at 2 KiB. It doubles twice per call: once in grpc-go before the
// handler, and once while encoding the response. There, proto's reflective
// walk of a dynamic message is deep. The runtime copies a stack frame by
// frame, looking up each frame's pointer map. So the second growth costs
// about twice as much there as here (docs/performance.md). A stack large
// enough already costs the frame's zeroing alone.
//
//go:noinline
func growStack(i int) byte {
	var buf [growFrame]byte
	buf[i] = 1
	return buf[(i+1)%growFrame]
}

// growFrame is the size of growStack's frame. With the runtime's guard
// below it, it is more than a 4 KiB stack has left once grpc-go's frames
// are on it. It is little enough that the stack grows to 8 KiB, where
// grpc-go's own growths leave it.
const growFrame = 3 << 10

// receive decodes the request message into req. It waits at most
// WithRecvTimeout for it (see there). dec is grpc-go's, the stream's
// RecvMsg. It returns when the message is complete or the stream's context
// ends. So when the bound fires, the receiving goroutine is free again as
// soon as the answer closes the stream. req is then never touched again.
//
// The message is read on a receiver goroutine: an idle one when there is
// one, else a new one (see receiveLoop).
func (a *Adapter) receive(dec func(any) error, req *dynamicpb.Message) error {
	d := a.recvWait()
	if d <= 0 {
		return decodeRequest(dec, req)
	}
	r := &reception{dec: dec, req: req, done: make(chan error, 1)}
	a.handOff(r)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case err := <-r.done:
		return err
	case <-t.C:
		return errRecvTimeout
	}
}

// recvWait returns how long one call's request message may take to
// arrive: WithRecvTimeout's d, plus up to d/4 drawn at random. Calls
// stalled together are then answered over a quarter of d, not in one
// burst that takes the CPU from the calls that are served meanwhile.
func (a *Adapter) recvWait() time.Duration {
	d := a.cfg.recvTimeout
	if d <= 0 || a.cfg.recvExact {
		return d
	}
	return d + rand.N(d/4+1)
}

// handOff gives r to an idle receiver goroutine, or to a new one.
func (a *Adapter) handOff(r *reception) {
	select {
	case a.receivers <- r:
	default:
		go a.receiveLoop(r)
	}
}

// The states of a reception that runs its call (serve): reading until the
// message is read or the WithRecvTimeout timer fires, whichever is first.
const (
	receptionReading int32 = iota
	receptionRead
	receptionTimedOut
)

// reception is one request message to read: decodeRequest(dec, req). For
// receive, the read's result is sent to done. For serve (m not nil), the
// receiver goroutine runs the call once the message is read. done then
// gets the answer's status error, or errRecvTimeout; nil means resp is the
// response. done is buffered and only ever sent to once, by the winner of
// state: the sender never waits.
type reception struct {
	dec  func(any) error
	req  *dynamicpb.Message
	done chan error

	m     *method         // nil: only read (receive)
	ctx   context.Context // the call's server context
	timer *time.Timer     // WithRecvTimeout's; nil: no bound
	state atomic.Int32    // receptionReading, then Read or TimedOut
	start time.Time       // when the message was read
	resp  any             // the response, set before done is sent nil

	meta      *operations.Metadata // the call's, set before respondFn runs
	respondFn func(kernel.Outcome) // r.respond, made once
	refs      atomic.Int32         // serve's and the receiver's (see release)
	reusable  bool                 // the timer was stopped before it fired, or there is none
}

// expire runs when WithRecvTimeout fires: unless the message was read,
// the call is answered without it.
func (r *reception) expire() {
	if r.state.CompareAndSwap(receptionReading, receptionTimedOut) {
		r.done <- errRecvTimeout
	}
}

// run reads r's message and, for serve, runs its call (see serve).
func (r *reception) run() {
	err := decodeRequest(r.dec, r.req)
	if r.m == nil {
		r.done <- err
		return
	}
	defer r.release()
	if !r.state.CompareAndSwap(receptionReading, receptionRead) {
		return // answered DeadlineExceeded already: the message is dropped
	}
	r.reusable = r.timer == nil || r.timer.Stop()
	if err != nil {
		r.done <- r.m.unreceived(r.ctx, err)
		return
	}
	r.start = time.Now()
	r.m.serveCall(r.ctx, r.req, &r.meta, r.respondFn)
}

// respond is the kernel's answer to r's call: it converts the outcome to
// the response and hands it to grpc-go's goroutine. The kernel calls it
// once, from the receiver goroutine or, for a chain late past its
// deadline, from the guard's.
func (r *reception) respond(o kernel.Outcome) {
	resp, err := r.m.reply(r.ctx, o, r.start, r.meta)
	r.resp = resp
	r.done <- err
}

// receiverIdle is how long a receiver goroutine waits for another message
// to read before it exits. A new goroutine starts with a small stack,
// which grpc-go's read path and the call's chain outgrow, and the runtime
// copies it each time it doubles — more work than the rest of the
// adapter's per-call bookkeeping. A receiver that reads one message after
// another keeps its grown stack. A server under load hands every read to
// a waiting receiver; an idle server keeps none for more than a few
// milliseconds.
const receiverIdle = 5 * time.Millisecond

// receiveLoop runs r, then the receptions handOff gives it, until it has
// waited receiverIdle for one.
func (a *Adapter) receiveLoop(r *reception) {
	idle := time.NewTimer(receiverIdle)
	defer idle.Stop()
	for {
		r.run()
		r = nil // keep nothing of the call while idle
		idle.Reset(receiverIdle)
		select {
		case r = <-a.receivers:
		case <-idle.C:
			return
		}
	}
}

// decodeRequest runs grpc-go's decoder into req. Dynamic messages take
// protobuf-go's generic (reflective) unmarshal path. It panics on some
// malformed map entries, such as a key field repeated with another wire
// type. Such a panic is a malformed request, not a crash.
func decodeRequest(dec func(any) error, req *dynamicpb.Message) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = status.Errorf(codes.InvalidArgument, "grpcadapter: malformed request message: %v", p)
		}
	}()
	return dec(req)
}

// call converts the request to the operation's input, runs the operation
// through the kernel and converts its outcome to the response.
func (m *method) call(ctx context.Context, req *dynamicpb.Message) (any, error) {
	start := time.Now()
	parent, stop := m.a.inbound(ctx)
	defer stop()
	var u kernel.Unary
	var meta *operations.Metadata
	parent, err := m.enter(ctx, parent, req, &u, &meta)
	if err != nil {
		return m.reply(ctx, m.Op.Reject(parent, u.Caller, err), start, meta)
	}
	return m.reply(ctx, m.Op.Handle(parent, u), start, meta)
}

// serveCall runs one call of the request message under the kernel's guard
// (kernel.Op.Serve), on the calling goroutine: respond gets the outcome
// once, by the invocation's deadline whatever the handler does. A message
// that does not convert to the input is the call's rejection. The call's
// metadata go in *meta before respond is called.
func (m *method) serveCall(ctx context.Context, req *dynamicpb.Message, meta **operations.Metadata, respond func(kernel.Outcome)) {
	parent, stop := m.a.inbound(ctx)
	defer stop()
	var u kernel.Unary
	parent, err := m.enter(ctx, parent, req, &u, meta)
	if err != nil {
		respond(m.Op.Reject(parent, u.Caller, err))
		return
	}
	m.Op.Serve(parent, u, respond)
}

// enter fills in u and *meta for the request message, whose server
// context is ctx, and returns the invocation's parent context (see
// prepare). The error is the rejection of a message that does not
// convert to the input.
func (m *method) enter(ctx, parent context.Context, req *dynamicpb.Message, u *kernel.Unary, meta **operations.Metadata) (context.Context, error) {
	parent = m.a.prepare(ctx, parent, m.Full, m.Desc.ID, &u.Caller)
	parent, *meta = withMetadata(ctx, parent)
	in, err := m.DecodeInput(req)
	u.Input = in
	return parent, err
}

// reply converts the outcome of a call that started at start to the
// response (nil on failure) and the status error of the answer (see
// answer). It sends the metadata the handler set.
func (m *method) reply(ctx context.Context, o kernel.Outcome, start time.Time, meta *operations.Metadata) (any, error) {
	var resp any
	if o.Err == nil {
		resp, o.Err = m.EncodeOutput(o.Output)
	}
	sendMetadata(ctx, meta)
	if err := m.a.answer(ctx, m.Full, o, start); err != nil {
		return nil, err
	}
	return resp, nil
}
