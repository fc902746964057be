package grpcadapter

import (
	"context"
	"errors"
	"math/rand/v2"
	"reflect"
	"strconv"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
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
		m.a.canceled.add(ctx, true)
		return nil, status.Error(codes.Canceled, context.Canceled.Error())
	}
	if icpt == nil || isOwnUnary(icpt) {
		return m.serve(ctx, dec)
	}
	req := dynamicpb.NewMessage(m.in.desc)
	if err := m.a.receive(dec, req); err != nil {
		return nil, m.unreceived(ctx, err)
	}
	info := &grpc.UnaryServerInfo{Server: srv, FullMethod: m.full}
	return icpt(ctx, req, info, func(ctx context.Context, req any) (any, error) {
		msg, ok := req.(*dynamicpb.Message)
		if !ok {
			return nil, m.reject(ctx, pipeline.NewError(pipeline.KindUnexpected, pipeline.CodeUnexpected,
				fmt.Sprintf("grpcadapter: an interceptor replaced the request of %s with %T", m.full, req)))
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
			m.a.canceled.add(ctx, true)
			return status.Error(codes.Unavailable, "grpcadapter: connection closed by the listener's guard")
		}
		return m.reject(ctx, pipeline.ErrTimeout())
	}
	if status.Code(err) == codes.Canceled && ctx.Err() == context.Canceled {
		// The client reset the stream (or its connection ended) before
		// the message: no one is left to answer, and no invocation ran.
		// It is counted, not logged one by one (see canceledCalls).
		m.a.canceled.add(ctx, true)
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
	parent = m.a.prepare(ctx, parent, m.full, m.desc.ID, &c)
	return m.a.answer(ctx, m.full, m.op.Reject(parent, c, outcome), start)
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
	r.dec, r.req, r.m, r.ctx = dec, dynamicpb.NewMessage(m.in.desc), m, ctx
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
	r.dec, r.req, r.m, r.ctx, r.resp, r.reusable = nil, nil, nil, nil, nil, false
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
		return m.reply(ctx, m.op.Reject(parent, u.Caller, err), start, meta)
	}
	return m.reply(ctx, m.op.Handle(parent, u), start, meta)
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
		respond(m.op.Reject(parent, u.Caller, err))
		return
	}
	m.op.Serve(parent, u, respond)
}

// enter fills in u and *meta for the request message, whose server
// context is ctx, and returns the invocation's parent context (see
// prepare). The error is the rejection of a message that does not
// convert to the input.
func (m *method) enter(ctx, parent context.Context, req *dynamicpb.Message, u *kernel.Unary, meta **operations.Metadata) (context.Context, error) {
	parent = m.a.prepare(ctx, parent, m.full, m.desc.ID, &u.Caller)
	parent, *meta = withMetadata(ctx, parent)
	in, err := m.decodeInput(req)
	u.Input = in
	return parent, err
}

// reply converts the outcome of a call that started at start to the
// response (nil on failure) and the status error of the answer (see
// answer). It sends the metadata the handler set.
func (m *method) reply(ctx context.Context, o kernel.Outcome, start time.Time, meta *operations.Metadata) (any, error) {
	var resp any
	if o.Err == nil {
		resp, o.Err = m.encodeOutput(o.Output)
	}
	sendMetadata(ctx, meta)
	if err := m.a.answer(ctx, m.full, o, start); err != nil {
		return nil, err
	}
	return resp, nil
}

// encodeOutput converts the operation's result to the response message.
func (m *method) encodeOutput(v any) (*dynamicpb.Message, error) {
	out := dynamicpb.NewMessage(m.out.desc)
	rv := reflect.ValueOf(v)
	if !rv.IsValid() {
		return out, nil
	}
	if rv.Kind() == reflect.Pointer {
		if rv.IsNil() {
			return out, nil
		}
		rv = rv.Elem()
	}
	if rv.Type() != m.out.goType && !m.out.empty {
		return nil, pipeline.NewError(pipeline.KindUnexpected, pipeline.CodeUnexpected,
			fmt.Sprintf("grpcadapter: operation %q returned %v, want %v", m.desc.ID, rv.Type(), m.out.goType))
	}
	m.out.encode(rv, out)
	return out, nil
}

// decodeInput converts the request to a new value of the operation's input
// type (a pointer to it, as the handler expects), and checks its
// constraints.
func (m *method) decodeInput(req *dynamicpb.Message) (any, error) {
	in, err := m.convertInput(req)
	if err != nil {
		return nil, err
	}
	if perr := m.desc.CheckConstraints(in); perr != nil {
		return nil, perr // the values' validate tags, as over HTTP and the CLI
	}
	return in, nil
}

// convertInput converts the request to a new value of the operation's
// input type, a pointer to it. It checks no constraint.
func (m *method) convertInput(req *dynamicpb.Message) (any, error) {
	p := reflect.New(m.desc.Input)
	target := p.Elem()
	if target.Kind() == reflect.Pointer {
		target.Set(reflect.New(target.Type().Elem()))
		target = target.Elem()
	}
	// The operation's input policy: a field number the schema does not
	// have is an unknown field, the same answer as over HTTP and the CLI.
	if !m.desc.InputPolicy.AllowUnknownFields {
		if path := unknownField(req.ProtoReflect(), ""); path != "" {
			return nil, operations.UnknownField(path, "")
		}
	}
	if m.in.empty {
		return p.Interface(), nil
	}
	if err := m.in.decode(req.ProtoReflect(), target); err != nil {
		if fe, ok := errors.AsType[*fieldError](err); ok {
			return nil, pipeline.NewError(pipeline.KindValidation, pipeline.CodeValidation, fmt.Sprintf("Field '%s': %s.", fe.Path(), fe.msg)).
				WithDetail("field", fe.Path())
		}
		return nil, pipeline.Wrap(pipeline.KindValidation, pipeline.CodeValidation, "The request message is invalid.", err)
	}
	return p.Interface(), nil
}

// unknownField returns the path of the first field of msg (or of a message
// in it) whose number its descriptor does not have — "#7",
// "lines[1].#7" — or "".
func unknownField(msg protoreflect.Message, path string) string {
	if raw := msg.GetUnknown(); len(raw) > 0 {
		if num, _, n := protowire.ConsumeTag(raw); n > 0 {
			return joinPath(path, "#"+strconv.Itoa(int(num)))
		}
		return joinPath(path, "#?")
	}
	if !holdsMessages(msg.Descriptor()) {
		return "" // no field of msg is a message: no unknown field below it
	}
	var found string
	msg.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList() && fd.Message() != nil:
			name, l := joinPath(path, fd.JSONName()), v.List()
			for i := range l.Len() {
				if found = unknownField(l.Get(i).Message(), name+"["+strconv.Itoa(i)+"]"); found != "" {
					return false
				}
			}
		case fd.IsMap() && fd.MapValue().Message() != nil:
			name := joinPath(path, fd.JSONName())
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				found = unknownField(mv.Message(), joinPath(name, k.String()))
				return found == ""
			})
		case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
			found = unknownField(v.Message(), joinPath(path, fd.JSONName()))
		}
		return found == ""
	})
	return found
}

// holdsMessages reports whether a field of md is a message, a list of
// messages or a map, whose entries are messages. Looking at the descriptor
// alone spares a flat message the walk over its values; most requests are
// flat. The walk's callbacks are the deepest frames a call puts on
// grpc-go's stream goroutine. That goroutine is new for every call, and
// each doubling of its stack copies it.
func holdsMessages(md protoreflect.MessageDescriptor) bool {
	fields := md.Fields()
	for i := range fields.Len() {
		if fields.Get(i).Message() != nil {
			return true
		}
	}
	return false
}

func joinPath(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}
