package connectadapter

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/net/http/httpguts"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/sundial-go/sundial/adapters/internal/rpccall"
	"github.com/sundial-go/sundial/adapters/internal/rpcschema"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
)

// procedure is one operation served as a Connect procedure.
type procedure struct {
	srv       *rpccall.Server
	m         *rpcschema.Method
	readLimit int // the largest message, inflated (WithReadLimit)
}

// logMessage is the message of a call's log record.
const logMessage = "connect call"

// headerTraceID names the trace of a failed call, as gRPC's trailer does.
const headerTraceID = "Sundial-Trace-Id"

// call runs one call through the operation's handle. connect-go has read
// the request and set the caller's deadline on ctx. The answer leaves by
// the invocation's deadline whatever the handler does (kernel.Op.Handle).
func (p *procedure) call(ctx context.Context, req *connect.Request[request]) (*connect.Response[dynamicpb.Message], error) {
	start := time.Now()
	md := p.srv.Header(ctx, req.Header(), p.m.Desc.ID, p.m.Full)
	var u kernel.Unary
	parent, stop := p.srv.Enter(ctx, md, p.m.Full, &u.Caller)
	defer stop()
	u.Protocol = pipeline.ProtocolConnect
	parent, meta := operations.WithMetadata(parent, req.Header)
	var o kernel.Outcome
	if in, err := p.input(req.Msg); err != nil {
		o = p.m.Op.Reject(parent, u.Caller, err)
	} else {
		u.Input = in
		o = p.m.Op.Handle(parent, u)
	}
	var resp *dynamicpb.Message
	if o.Err == nil {
		resp, o.Err = p.m.EncodeOutput(o.Output)
	}
	st := p.srv.Answer(ctx, p.m.Full, o, start, logMessage)
	header, trailer := meta.SendHeader(), meta.SendTrailer()
	if st != nil {
		e := connectError(st)
		handlerFields(e.Meta(), header)
		handlerFields(e.Meta(), trailer)
		replyFields(e.Meta(), o.Invocation)
		if o.TraceID != "" {
			e.Meta().Set(headerTraceID, o.TraceID)
		}
		return nil, e
	}
	res := connect.NewResponse(resp)
	handlerFields(res.Header(), header)
	handlerFields(res.Trailer(), trailer)
	replyFields(res.Header(), o.Invocation)
	return res, nil
}

// handlerFields adds the headers or trailers a handler set (h) to dst,
// except those the protocols own (rpccall.OwnedHeader) and those HTTP
// cannot carry.
func handlerFields(dst, h http.Header) {
	for k, vs := range h {
		if rpccall.OwnedHeader(k) || !httpguts.ValidHeaderFieldName(k) {
			continue
		}
		for _, v := range vs {
			if httpguts.ValidHeaderFieldValue(v) {
				dst.Add(k, v)
			}
		}
	}
}

// input converts the request message to the operation's input.
func (p *procedure) input(r *request) (any, error) {
	if r.err != nil {
		return nil, r.outcome()
	}
	return p.m.DecodeInput(r.msg)
}

// unknownMethod answers the calls of a service's unknown methods through
// the kernel: unimplemented, observed and logged like every other call.
type unknownMethod struct {
	srv      *rpccall.Server
	services map[string]bool // by full name
}

func (u unknownMethod) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start, ctx, full := time.Now(), r.Context(), r.URL.Path
	parent, stop := u.srv.Inbound(ctx)
	defer stop()
	o, st := u.srv.Unknown(parent, u.srv.Header(ctx, r.Header, "", full), full, func(s string) bool { return u.services[s] })
	u.srv.LogCall(ctx, full, o, st, start, logMessage)
	e := connectError(st)
	if o.TraceID != "" {
		e.Meta().Set(headerTraceID, o.TraceID)
	}
	_ = connect.NewErrorWriter().Write(w, r, e)
}

// unknownPath answers a call of a path outside every served service as
// unknownMethod does, and any other request 404. A unary call of the
// Connect protocol gets HTTP status 404, as the protocol asks for a path
// no procedure serves.
type unknownPath struct{ u unknownMethod }

func (u unknownPath) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !connect.NewErrorWriter().IsSupported(r) || r.Method == http.MethodGet && !r.URL.Query().Has("message") {
		// Not a call: a Connect GET carries its message in the query.
		http.NotFound(w, r)
		return
	}
	if ct := r.Header.Get("Content-Type"); r.Method == http.MethodGet ||
		!strings.HasPrefix(ct, "application/grpc") && !strings.HasPrefix(ct, "application/connect+") {
		w = notFoundWriter{w}
	}
	u.u.ServeHTTP(w, r)
}

// notFoundWriter writes status 404 in place of any other.
type notFoundWriter struct{ http.ResponseWriter }

func (w notFoundWriter) WriteHeader(int) { w.ResponseWriter.WriteHeader(http.StatusNotFound) }

// connectError returns st as a Connect error: the same code, message and
// details.
func connectError(st *status.Status) *connect.Error {
	e := connect.NewError(connect.Code(st.Code()), errors.New(st.Message()))
	for _, d := range st.Proto().GetDetails() {
		if det, err := connect.NewErrorDetail(d); err == nil {
			e.AddDetail(det)
		}
	}
	return e
}

// replyFields sets the fields of the invocation's reply (RateLimit,
// Idempotent-Replayed, ...) on h. A field HTTP cannot carry is left out.
func replyFields(h http.Header, inv *pipeline.Invocation) {
	for _, f := range inv.Reply().Fields() {
		if httpguts.ValidHeaderFieldName(f.Name) && httpguts.ValidHeaderFieldValue(f.Value) {
			h.Add(f.Name, f.Value)
		}
	}
}
