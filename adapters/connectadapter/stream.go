package connectadapter

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/sundial-go/sundial/adapters/internal/streamctx"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
)

// This file serves one call of a streaming operation. Its stream.Raw is
// connect-go's StreamingHandlerConn, and the kernel runs the call
// (kernel.Op.Stream) on connect-go's goroutine.
//
// connect-go has no way to unblock a Send or a Receive. Abort sets the
// deadlines of the request's connection instead: a blocked Receive
// returns at once, a blocked Send after abortGrace. connect-go then
// writes the outcome as the end of the stream.

// abortGrace is how long Abort lets a Send in progress finish. A caller
// who reads takes it at once, and the outcome can follow it. A Send still
// blocked fails, and the caller's stream is reset.
const abortGrace = 100 * time.Millisecond

// outcomeWriteTimeout bounds the write of a stream's outcome, so that a
// caller who stopped reading cannot hold the handler's goroutine.
const outcomeWriteTimeout = 5 * time.Second

// aLongTimeAgo is a read deadline that has passed: reads fail at once.
var aLongTimeAgo = time.Unix(1, 0)

// errAborted is what a Send or Recv returns once the stream has ended.
var errAborted = errors.New("connectadapter: the stream has ended")

// controllerKey is the context key of a request's *http.ResponseController.
type controllerKey struct{}

// http1Key is the context key of a request over HTTP/1.x: true.
type http1Key struct{}

// streamServe serves a streaming procedure. It hands its handler the
// request's ResponseController, which Abort uses. Once connect-go has
// answered, it lifts the write deadline Abort may have set: the
// connection may serve another request.
type streamServe struct{ h http.Handler }

func (s streamServe) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	ctx := context.WithValue(r.Context(), controllerKey{}, rc)
	if r.ProtoMajor == 1 {
		ctx = context.WithValue(ctx, http1Key{}, true)
	}
	s.h.ServeHTTP(w, r.WithContext(ctx))
	_ = rc.SetWriteDeadline(time.Time{})
}

// connRaw is one served stream: the transport's side of the kernel's
// stream (stream.Raw).
type connRaw struct {
	p    *procedure
	conn connect.StreamingHandlerConn
	rc   *http.ResponseController // nil: Abort cannot unblock the stream
	ctx  context.Context          // the request's
	// caller is the invocation's parent: it ends when the caller leaves.
	caller context.Context
	reads  bool // the caller streams: Abort ends the request body's reads
	meta   *operations.Metadata

	sending, aborted, sent atomic.Bool
	// readsEnded: Abort made the connection's reads fail. Over HTTP/1.1
	// the connection then serves no other request: net/http's read in
	// the background fails too, and that ends the context of every later
	// request on the connection.
	readsEnded atomic.Bool
}

// Send sends one of the handler's outputs.
func (r *connRaw) Send(v any) error {
	msg, err := r.p.m.EncodeOutput(v)
	if err != nil {
		return err
	}
	r.sending.Store(true)
	defer r.sending.Store(false)
	if r.aborted.Load() { // after sending is set: Abort sees one or the other
		return errAborted
	}
	if !r.sent.Swap(true) {
		handlerFields(r.conn.ResponseHeader(), r.meta.SendHeader())
	}
	if err := r.conn.Send(msg); err != nil {
		return r.failed(err)
	}
	return nil
}

// Recv receives one of the caller's messages as the operation's input
// type, and its size in bytes.
func (r *connRaw) Recv() (any, int, error) {
	if r.aborted.Load() {
		return nil, 0, errAborted
	}
	req := r.p.newRequest()
	if err := r.conn.Receive(req); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, 0, io.EOF
		}
		if connect.CodeOf(err) == connect.CodeResourceExhausted {
			// The caller's message is over WithReadLimit: its fault, not
			// the transport's.
			return nil, 0, pipeline.NewError(pipeline.KindValidation, pipeline.CodeValidation,
				"A message of the stream is larger than "+strconv.Itoa(r.p.readLimit)+" bytes.").
				WithDetail("limit", r.p.readLimit)
		}
		return nil, 0, r.failed(err)
	}
	if req.err != nil {
		return nil, req.size, req.outcome()
	}
	in, err := r.p.m.ConvertInput(req.msg)
	return in, req.size, err
}

// Abort makes a blocked Receive return at once, and a blocked Send within
// abortGrace.
func (r *connRaw) Abort(error) {
	r.aborted.Store(true)
	if r.rc == nil {
		return
	}
	if r.sending.Load() {
		_ = r.rc.SetWriteDeadline(time.Now().Add(abortGrace))
	}
	if r.reads {
		r.readsEnded.Store(true)
		_ = r.rc.SetReadDeadline(aLongTimeAgo)
	}
}

// failed returns err, the error of a Send or Recv, once the caller's end
// is known: when the request has ended, the kernel then sees the caller
// leave rather than a transport failure.
//
// A caller's reset (RST_STREAM CANCEL, which connect-go reports as
// Canceled) may reach a blocked Receive before the request's context
// ends: net/http's HTTP/2 server closes the request body with the reset,
// then cancels the context. failed waits for that cancel too.
func (r *connRaw) failed(err error) error {
	if (r.ctx.Err() != nil || connect.CodeOf(err) == connect.CodeCanceled) && !r.aborted.Load() {
		streamctx.AwaitEnd(r.caller)
	}
	return err
}

// callerContext returns ctx with its values and deadline, ended when
// the caller leaves before a clock or bound ended the stream.
func (r *connRaw) callerContext(ctx context.Context) (context.Context, func()) {
	return streamctx.Follow(ctx, r.aborted.Load)
}

// newRequest returns a request ready for one of the caller's messages.
func (p *procedure) newRequest() *request {
	r := new(request)
	r.init(p.m.Input(), p.m.Desc.InputPolicy.AllowUnknownFields)
	return r
}

// streamHandler returns connect-go's handler of p's streaming procedure,
// whose kind is k.
func (p *procedure) streamHandler(k operations.Kind, opts []connect.HandlerOption) http.Handler {
	var h http.Handler
	switch k {
	case operations.ServerStream:
		h = connect.NewServerStreamHandler(p.m.Full,
			func(ctx context.Context, req *connect.Request[request], ss *connect.ServerStream[dynamicpb.Message]) error {
				_, err := p.stream(ctx, ss.Conn(), req.Msg)
				return err
			}, opts...)
	case operations.ClientStream:
		h = connect.NewClientStreamHandler(p.m.Full,
			func(ctx context.Context, cs *connect.ClientStream[request]) (*connect.Response[dynamicpb.Message], error) {
				resp, err := p.stream(ctx, cs.Conn(), nil)
				if err != nil {
					return nil, err
				}
				return connect.NewResponse(resp), nil
			}, opts...)
	default:
		h = connect.NewBidiStreamHandler(p.m.Full,
			func(ctx context.Context, bs *connect.BidiStream[request, dynamicpb.Message]) error {
				_, err := p.stream(ctx, bs.Conn(), nil)
				return err
			}, opts...)
	}
	return streamServe{h}
}

// stream runs one streaming call through the operation's handle. req is a
// server stream's request, which connect-go has read; nil for the other
// kinds. It returns a client stream's reply, or the error that ends the
// stream: connect-go sends it as the end of the stream, with the messages
// sent before it.
func (p *procedure) stream(ctx context.Context, conn connect.StreamingHandlerConn, req *request) (*dynamicpb.Message, error) {
	start := time.Now()
	md := p.srv.Header(ctx, conn.RequestHeader(), p.m.Desc.ID, p.m.Full)
	rc, _ := ctx.Value(controllerKey{}).(*http.ResponseController)
	if rc != nil {
		// The stream's clocks bound it, not the server's timeouts. A
		// server stream's request has been read by now.
		_ = rc.SetReadDeadline(time.Time{})
		_ = rc.SetWriteDeadline(time.Time{})
	}
	raw := &connRaw{p: p, conn: conn, rc: rc, ctx: ctx, reads: req == nil}
	cctx, done := raw.callerContext(ctx)
	defer done()
	c := kernel.StreamCall{Raw: raw}
	parent, stop := p.srv.Enter(cctx, md, p.m.Full, &c.Caller)
	defer stop()
	raw.caller = parent
	parent, raw.meta = operations.WithMetadata(parent, conn.RequestHeader)
	c.Protocol = pipeline.ProtocolConnect
	if req != nil {
		c.Decode = func(time.Time) (any, error) { return p.input(req) }
	}
	o := p.m.Op.Stream(parent, c)
	var resp *dynamicpb.Message
	if o.Err == nil && req == nil && p.m.Desc.Kind() == operations.ClientStream {
		resp, o.Err = p.m.EncodeOutput(o.Output)
	}
	st := p.srv.Answer(ctx, p.m.Full, o, start, logMessage)
	if !raw.sent.Load() {
		handlerFields(conn.ResponseHeader(), raw.meta.SendHeader())
		replyFields(conn.ResponseHeader(), o.Invocation)
	}
	handlerFields(conn.ResponseTrailer(), raw.meta.SendTrailer())
	if http1, _ := ctx.Value(http1Key{}).(bool); http1 && raw.readsEnded.Load() && !raw.sent.Load() {
		conn.ResponseHeader().Set("Connection", "close")
	}
	if raw.aborted.Load() && rc != nil {
		// The outcome goes out whatever ended the stream, within a bound.
		_ = rc.SetWriteDeadline(time.Now().Add(outcomeWriteTimeout))
	}
	if st != nil {
		e := connectError(st)
		if o.TraceID != "" {
			e.Meta().Set(headerTraceID, o.TraceID)
		}
		return nil, e
	}
	return resp, nil
}
