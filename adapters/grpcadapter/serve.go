package grpcadapter

import (
	"context"
	"errors"
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

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
)

// This file serves one unary call: it receives the request, converts it
// to the operation's input and its result to the response.

// handle is the grpc.MethodDesc handler of one operation. Without an
// interceptor, or with only the adapter's own (which passes the adapter's
// methods straight through), the whole call runs on grpc-go's goroutine
// (see serve). With others, the request is received first, then
// the interceptors run on grpc-go's goroutine and the chain on another
// (kernel.Handle), so that they see the answer the deadline gives.
func (m *method) handle(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
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
			return nil, m.reject(ctx, pipeline.Errorf(pipeline.KindUnexpected, pipeline.CodeUnexpected,
				"grpcadapter: an interceptor replaced the request of %s with %T", m.full, req))
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
		// closes the stream, which ends the read.
		return m.reject(ctx, pipeline.ErrTimeout())
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
	o := m.a.invoke(ctx, m.full, kernel.Request{Operation: m.desc.ID, Reject: outcome})
	return m.a.answer(ctx, m.full, o, start)
}

// errRecvTimeout reports a request message that did not arrive within
// WithRecvTimeout.
var errRecvTimeout = errors.New("grpcadapter: request message not received in time")

// serve runs one call on grpc-go's goroutine, under the kernel's guard
// (kernel.Serve), with no hand-off to another goroutine. A unary handler
// answers by returning, which a handler that ignores its context delays;
// so when the guard answers without the chain's outcome (at the deadline,
// or when the caller went away), the answer is written to the stream at
// once, from the guard's goroutine, and the handler runs on. WithRecvTimeout
// bounds the read of the request message the same way: when its timer
// fires first, the call is answered DeadlineExceeded from the timer's
// goroutine, which ends the read, and the message is dropped.
//
// Writing the status from another goroutine needs grpc-go's server stream
// (the ServerTransportStream of the call's context), whose WriteStatus
// ends the stream and cancels its context; a second write, grpc-go's own
// when the handler returns, finds the stream done and writes nothing.
// WriteStatus is a method of grpc-go's stream type rather than of its
// exported interface, so a context without it (a call not made by a
// grpc-go server) is served as under an application's interceptor: the
// message read on a receiver goroutine, the chain on another
// (kernel.Handle). TestServerStreamWritesStatus fails when a grpc-go
// version drops the method.
func (m *method) serve(ctx context.Context, dec func(any) error) (any, error) {
	w, ok := grpc.ServerTransportStreamFromContext(ctx).(statusWriter)
	if !ok {
		req := dynamicpb.NewMessage(m.in.desc)
		if err := m.a.receive(dec, req); err != nil {
			return nil, m.unreceived(ctx, err)
		}
		return m.call(ctx, req)
	}
	growStack(0)
	u := m.a.unary()
	u.m, u.ctx, u.w = m, ctx, w
	u.state.Store(unaryReading)
	if d := m.a.cfg.recvTimeout; d > 0 {
		if u.timer == nil {
			u.timer = time.AfterFunc(d, u.expire)
		} else {
			u.timer.Reset(d)
		}
	}
	req := dynamicpb.NewMessage(m.in.desc)
	err := decodeRequest(dec, req)
	if !u.state.CompareAndSwap(unaryReading, unaryRead) {
		return nil, <-u.unread // answered at the bound: the message is dropped
	}
	reusable := u.timer == nil || u.timer.Stop()
	if err != nil {
		u.release(reusable)
		return nil, m.unreceived(ctx, err)
	}
	u.start = time.Now()
	m.a.serve(ctx, m.full, m.kernelRequest(req), u.respondFn)
	resp, err := u.resp, u.err // respond has returned: Serve waits for it
	u.release(reusable)
	return resp, err
}

// statusWriter is the method of grpc-go's server stream that serve
// answers with from another goroutine (see there).
type statusWriter interface {
	WriteStatus(*status.Status) error
}

// The states of a unary call: reading its message until the message is
// read or the WithRecvTimeout timer fires, whichever is first.
const (
	unaryReading int32 = iota
	unaryRead
	unaryTimedOut
)

// unary is one call served on grpc-go's goroutine (see serve). Pooled, it
// keeps its channel, its timer and its respond function: allocations a
// call does not make.
type unary struct {
	m     *method
	ctx   context.Context // the call's server context
	w     statusWriter    // the call's stream
	timer *time.Timer     // WithRecvTimeout's; nil: no bound
	state atomic.Int32    // unaryReading, then Read or TimedOut
	start time.Time       // when the message was read

	resp any   // the response, set by respond
	err  error // the answer's status error (nil: resp), set by respond

	unread    chan error           // expire's answer, sent once
	respondFn func(kernel.Outcome) // u.respond, made once
}

// unary returns a unary call for serve: a pooled one, or a new one.
func (a *Adapter) unary() *unary {
	if u, ok := a.unaries.Get().(*unary); ok {
		return u
	}
	u := &unary{unread: make(chan error, 1)}
	u.respondFn = u.respond
	return u
}

// release pools u when it can be reused: when its timer was stopped before
// it fired (or it has none), so that no expire can still run for the call
// that used it.
func (u *unary) release(reusable bool) {
	if !reusable {
		return
	}
	a := u.m.a
	u.m, u.ctx, u.w, u.resp, u.err = nil, nil, nil, nil, nil
	a.unaries.Put(u)
}

// expire runs when WithRecvTimeout fires: unless the message was read,
// the call is answered DeadlineExceeded now, which ends the stream and so
// the read; serve returns the same answer once the read has returned.
func (u *unary) expire() {
	if u.state.CompareAndSwap(unaryReading, unaryTimedOut) {
		err := u.m.unreceived(u.ctx, errRecvTimeout)
		_ = u.w.WriteStatus(status.Convert(err))
		u.unread <- err
	}
}

// respond is the kernel's answer to u's call: it converts the outcome to
// the response and its status. The kernel calls it once: on grpc-go's
// goroutine when the chain returned, or, for a chain late past its
// deadline (o.Expired), on the guard's, which writes the status to the
// stream now; grpc-go's own write, when the handler returns, then writes
// nothing.
func (u *unary) respond(o kernel.Outcome) {
	u.resp, u.err = u.m.reply(u.ctx, o, u.start)
	if o.Expired {
		_ = u.w.WriteStatus(status.Convert(u.err))
	}
}

// growStack grows the stack of grpc-go's goroutine for the call while it
// holds few frames. grpc-go runs each call on a new goroutine, whose
// stack starts at 2 KiB and doubles as the call goes deeper: in grpc-go
// before the handler, in the chain, and while encoding the response,
// where proto's reflective walk of a dynamic message is deep. The runtime
// copies a stack frame by frame, looking up each frame's pointer map, so
// a growth deep in the call costs about twice as much as one here
// (callgrind; see docs/performance.md). A stack large enough already
// costs the frame's zeroing alone.
//
//go:noinline
func growStack(i int) byte {
	var buf [growFrame]byte
	buf[i] = 1
	return buf[(i+1)%growFrame]
}

// growFrame is the size of growStack's frame: with the runtime's guard
// below it, more than a 4 KiB stack has left once grpc-go's frames are on
// it, and little enough that the stack grows to 8 KiB.
const growFrame = 3 << 10

// receive decodes the request message into req, waiting at most
// WithRecvTimeout for it (see there). dec is grpc-go's, the stream's
// RecvMsg: it returns when the message is complete or the stream's context
// ends, so when the bound fires the receiving goroutine is free again as
// soon as the answer closes the stream; req is then never touched again.
//
// The message is read on a receiver goroutine: an idle one when there is
// one, else a new one (see receiveLoop).
func (a *Adapter) receive(dec func(any) error, req *dynamicpb.Message) error {
	d := a.cfg.recvTimeout
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

// handOff gives r to an idle receiver goroutine, or to a new one.
func (a *Adapter) handOff(r *reception) {
	select {
	case a.receivers <- r:
	default:
		go a.receiveLoop(r)
	}
}

// reception is one request message to read on a receiver goroutine
// (receive): decodeRequest(dec, req), whose result is sent to done.
type reception struct {
	dec  func(any) error
	req  *dynamicpb.Message
	done chan error // buffered: the receiver never waits
}

// receiverIdle is how long a receiver goroutine waits for another message
// to read before it exits. A new goroutine starts with a small stack,
// which grpc-go's read path outgrows, and the runtime copies it each time
// it doubles. A receiver that reads one message after another keeps its
// grown stack; an idle server keeps none for more than a few
// milliseconds.
const receiverIdle = 5 * time.Millisecond

// receiveLoop reads r's message, then those handOff gives it, until it has
// waited receiverIdle for one.
func (a *Adapter) receiveLoop(r *reception) {
	idle := time.NewTimer(receiverIdle)
	defer idle.Stop()
	for {
		r.done <- decodeRequest(r.dec, r.req)
		r = nil // keep nothing of the call while idle
		idle.Reset(receiverIdle)
		select {
		case r = <-a.receivers:
		case <-idle.C:
			return
		}
	}
}

// decodeRequest runs grpc-go's decoder into req. protobuf-go's generic
// (reflective) unmarshal path, the one dynamic messages take, panics on
// some malformed map entries (a key field repeated with another wire
// type); such a panic is a malformed request, not a crash.
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
	o := m.a.invoke(ctx, m.full, m.kernelRequest(req))
	return m.reply(ctx, o, start)
}

// kernelRequest returns the kernel's request for the request message: the
// operation's input, or the rejection of a message that does not convert.
func (m *method) kernelRequest(req *dynamicpb.Message) kernel.Request {
	r := kernel.Request{Operation: m.desc.ID}
	if in, err := m.decodeInput(req); err != nil {
		r.Reject = err
	} else {
		r.Input = in
	}
	return r
}

// reply converts the outcome of a call that started at start to the
// response (nil on failure) and the status error of the answer (see
// answer).
func (m *method) reply(ctx context.Context, o kernel.Outcome, start time.Time) (any, error) {
	var resp any
	if o.Err == nil {
		resp, o.Err = m.encodeOutput(o.Output)
	}
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
		return nil, pipeline.Errorf(pipeline.KindUnexpected, pipeline.CodeUnexpected,
			"grpcadapter: operation %q returned %v, want %v", m.desc.ID, rv.Type(), m.out.goType)
	}
	m.out.encode(rv, out)
	return out, nil
}

// decodeInput converts the request to a new value of the operation's input
// type (a pointer to it, as the handler expects).
func (m *method) decodeInput(req *dynamicpb.Message) (any, error) {
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
			return nil, pipeline.Errorf(pipeline.KindValidation, pipeline.CodeValidation, "Field '%s': %s.", fe.Path(), fe.msg).
				WithDetail("field", fe.Path())
		}
		return nil, pipeline.Wrap(pipeline.KindValidation, pipeline.CodeValidation, "The request message is invalid.", err)
	}
	if perr := m.desc.CheckConstraints(p.Interface()); perr != nil {
		return nil, perr // the values' validate tags, as over HTTP and the CLI
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
// messages or a map (whose entries are messages). Looking at the descriptor alone spares a
// flat message (most requests) the walk over its values, whose callbacks
// are the deepest frames a call puts on grpc-go's stream goroutine: that
// goroutine is new for every call, and each doubling of its stack copies
// it.
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
