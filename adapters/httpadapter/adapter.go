package httpadapter

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"golang.org/x/net/http/httpguts"

	"github.com/sundial-go/sundial/adapters/internal/header"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/kernel/logs"
	"github.com/sundial-go/sundial/kernel/propagation"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
)

// Adapter serves a kernel's operations on an echo instance. Create it with
// Mount. It is safe for concurrent use.
type Adapter struct {
	k      *kernel.Kernel
	cfg    config
	logger *slog.Logger
	routes []*route // the mounted operations, in registry order (OpenAPI)

	baggageLog *slog.Logger // logger, sampled: records of dropped baggage
}

// Mount mounts every operation of k that has an HTTP Method and Path on e.
// The application owns e: its own middleware and routes stay as they are.
// Unless WithErrorHandler(false) is given, Mount also installs the
// adapter's HTTPErrorHandler on e.
//
// Each route reads the caller's deadline: Sundial-Deadline, or the header
// of WithRelativeDeadlineHeader. It reads the body to its end within the
// body limit. It binds the JSON body, the path parameters and, for GET,
// HEAD and DELETE, the query parameters into the operation's input. It
// hands the call to k (kernel.Op.Serve) and writes the outcome: the
// descriptor's success status with the JSON output, or Problem Details. A
// request turned away before the pipeline goes through k too, as a
// rejection, so it is observed like any other call. Each request leaves
// one access log record.
//
// Some responses of e to an HTTP/1.x request say Connection: close, and
// the server closes the connection after them. This holds for every
// request with a chunked body, on any route (request smuggling, RFC 9112
// §6.1). It also holds when the body has not been read to its end as the
// response is written. The server then sends without reading the rest, so
// a client that dribbles a body holds neither a goroutine nor
// Server.Shutdown. Mount adds a Pre middleware to e for both; Wrap and
// HTTPErrorHandler do it too wherever they are used.
//
// A streaming operation is served through kernel.Op.Stream: SSE or
// NDJSON, as Accept chooses, or a WebSocket. Mount adds a GET route on
// its path for the WebSocket's handshake when its method is not GET.
//
// Mount fails, naming the operation, when two operations share a method
// and path. It also fails when a path parameter has no input field.
func Mount(e *echo.Echo, k *kernel.Kernel, opts ...Option) (*Adapter, error) {
	if e == nil || k == nil {
		return nil, errors.New("httpadapter: Mount: nil echo or kernel")
	}
	cfg := defaultConfig()
	for _, o := range opts {
		if o != nil {
			o.apply(&cfg)
		}
	}
	a := &Adapter{k: k, cfg: cfg, logger: cfg.logger}
	if a.logger == nil {
		a.logger = k.Logger()
	}
	a.baggageLog = logs.Sampled(a.logger, slog.LevelWarn, msgBaggageDropped)
	seen := make(map[string]string)
	var routes []*route
	for _, op := range k.Operations() {
		d := op.Descriptor()
		if d.Method == "" {
			continue
		}
		key := d.Method + " " + d.Path
		if other, dup := seen[key]; dup {
			return nil, fmt.Errorf("httpadapter: Mount: operations %q and %q are both mounted on %s", other, d.ID, key)
		}
		seen[key] = d.ID
		if ws := http.MethodGet + " " + d.Path; d.Kind() != operations.Unary && d.Method != http.MethodGet {
			if other, dup := seen[ws]; dup {
				return nil, fmt.Errorf("httpadapter: Mount: operations %q and %q both take %s (a WebSocket's handshake)", other, d.ID, ws)
			}
			seen[ws] = d.ID
		}
		rt, err := a.newRoute(op)
		if err != nil {
			return nil, fmt.Errorf("httpadapter: Mount: operation %q (%s): %w", d.ID, key, err)
		}
		routes = append(routes, rt)
	}
	a.routes = routes
	e.Pre(framingMiddleware)
	for _, rt := range routes {
		if rt.desc.Kind() == operations.Unary {
			e.Add(rt.desc.Method, rt.desc.Path, rt.serve)
			continue
		}
		e.Add(rt.desc.Method, rt.desc.Path, rt.serveStream)
		if rt.desc.Method != http.MethodGet { // a WebSocket's handshake
			e.GET(rt.desc.Path, rt.serveStream)
		}
	}
	if cfg.errorHandler {
		e.HTTPErrorHandler = a.HTTPErrorHandler
	}
	return a, nil
}

// route is one mounted operation, planned at Mount.
type route struct {
	a       *Adapter
	op      *kernel.Op
	desc    *operations.Descriptor
	name    string // "METHOD /path"
	binder  *binder
	success int
}

func (a *Adapter) newRoute(op *kernel.Op) (*route, error) {
	d := op.Descriptor()
	b, err := newBinder(d.Input, d.Method, pathParams(d.Path))
	if err != nil {
		return nil, err
	}
	return &route{a: a, op: op, desc: d, name: d.Method + " " + d.Path, binder: b, success: successStatus(d)}, nil
}

// pathParams returns the parameter names of an echo path: ":id" segments
// and a trailing "*".
func pathParams(path string) []string {
	var ps []string
	for seg := range strings.SplitSeq(path, "/") {
		switch {
		case strings.HasPrefix(seg, ":") && len(seg) > 1:
			ps = append(ps, seg[1:])
		case seg == "*":
			ps = append(ps, "*")
		}
	}
	return ps
}

// successStatus is the descriptor's SuccessStatus, else 201 for an ID
// ending in ".create", 204 for an empty struct output, 200 otherwise.
func successStatus(d *operations.Descriptor) int {
	switch {
	case d.SuccessStatus != 0:
		return d.SuccessStatus
	case strings.HasSuffix(d.ID, ".create"):
		return http.StatusCreated
	case d.Output != nil && d.Output.Kind() == reflect.Struct && d.Output.NumField() == 0:
		return http.StatusNoContent
	}
	return http.StatusOK
}

// serve handles one request of an operation route. It writes the response
// itself, in the exchange's answer, and returns nil, so echo's error
// handler never sees its outcomes.
func (rt *route) serve(c echo.Context) error {
	var u kernel.Unary
	x, ctx, ok := rt.begin(c, &u.Caller)
	defer x.release()
	if !ok {
		return nil
	}
	u.Decode = func(deadline time.Time) (any, error) { return rt.decode(c, x, deadline) }
	r := c.Request()
	ctx, x.meta = operations.WithMetadata(ctx, func() http.Header { return r.Header })
	rt.op.Serve(ctx, u, x.answer)
	return nil
}

// begin starts the exchange of c's request and fills in cl. It reads the
// caller's deadline; a malformed one is answered here, and ok is false.
// The caller releases x.
func (rt *route) begin(c echo.Context, cl *kernel.Caller) (x *exchange, ctx context.Context, ok bool) {
	a := rt.a
	r := c.Request()
	x = a.newExchange(c)
	x.name, x.success = rt.desc.ID, rt.success
	ctx = a.requestContext(r, rt.desc.ID)
	a.caller(cl, r, rt.name, rt.desc.Path, x)
	if a.cfg.callerDeadlines {
		d, header, err := inboundDeadline(r.Header, a.cfg.relHeader, x.start)
		if err != nil {
			x.respond(rt.op.Reject(ctx, *cl, badDeadline(header)))
			return x, ctx, false
		}
		cl.Deadline = d
	}
	return x, ctx, true
}

// caller fills in c for the request r of the route named route (path is
// its template; "" when none matched). A malformed Idempotency-Key is
// the kernel's to judge: a 400 only on an operation that takes keys.
func (a *Adapter) caller(c *kernel.Caller, r *http.Request, route, path string, x *exchange) {
	c.Protocol, c.Route, c.Arrival = pipeline.ProtocolHTTP, route, x.start
	c.Transport = x.transport(r, path)
	c.Priority = headerValue(r.Header, HeaderPriority)
	c.IdempotencyKey, c.BadIdempotencyKey = idempotencyKey(r)
}

// decode reads the request body, bounded by the invocation's effective
// deadline (which the kernel computed and hands over: a dribbled body gets
// its answer at the deadline), and binds it with the path and query
// parameters into a new input.
func (rt *route) decode(c echo.Context, x *exchange, deadline time.Time) (any, error) {
	buf, perr, status := rt.a.readBody(c, deadline)
	if perr != nil {
		x.reject(perr, status)
		return nil, perr
	}
	in := rt.desc.NewInput()
	r := c.Request()
	// The operation's input policy first (unknown fields, key case: the
	// same answer as over gRPC and the CLI), then the binding.
	perr = operations.CheckJSON(rt.desc.Input, rt.desc.InputPolicy, buf.Bytes())
	if perr == nil {
		perr = rt.binder.bind(r, c.ParamNames(), c.ParamValues(), buf.Bytes(), in)
	}
	if perr == nil {
		perr = rt.desc.CheckConstraints(in) // the values' validate tags
	}
	buf.Reset()
	bufPool.Put(buf)
	if perr != nil {
		return nil, perr
	}
	return in, nil
}

// idempotencyKey returns the Idempotency-Key header's key, "" when it is
// absent. It reports bad when the header is repeated, too long, or not a
// non-empty structured-field string (RFC 9651 sf-string, as
// draft-ietf-httpapi-idempotency-key-header requires: "..." with \" and
// \\ escapes). The kernel checks the key's own grammar.
func idempotencyKey(r *http.Request) (key string, bad bool) {
	vs := r.Header["Idempotency-Key"]
	if len(vs) == 0 {
		return "", false
	}
	if len(vs) > 1 || len(vs[0]) > 2*maxIdempotencyKey+2 {
		return "", true
	}
	key, ok := parseSFString(strings.Trim(vs[0], " \t"))
	if !ok || key == "" {
		return "", true
	}
	return key, false
}

// parseSFString decodes an RFC 9651 sf-string: DQUOTE *( unescaped /
// "\" ( DQUOTE / "\" ) ) DQUOTE, unescaped being printable ASCII.
func parseSFString(s string) (string, bool) {
	if len(s) < 2 || s[0] != '"' || s[len(s)-1] != '"' {
		return "", false
	}
	var b strings.Builder
	for i := 1; i < len(s)-1; i++ {
		c := s[i]
		switch {
		case c == '\\':
			i++
			if i >= len(s)-1 || (s[i] != '"' && s[i] != '\\') {
				return "", false
			}
			b.WriteByte(s[i])
		case c == '"' || c < 0x20 || c > 0x7e:
			return "", false
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), true
}

// requestContext is the invocation's parent context: the request's (which
// ends when the client goes away), carrying the caller's W3C trace context
// and baggage (propagation.ExtractHTTP), so that the invocation's span
// continues the caller's trace and the kernel finds the baggage. A baggage
// header over the limit is dropped whole, with a warning, before anything
// parses it. Callers send such headers at will: their records are sampled
// (logs.Sampler).
func (a *Adapter) requestContext(r *http.Request, name string) context.Context {
	h := r.Header
	bag, hasTrace := h["Baggage"], len(h["Traceparent"]) > 0
	if len(bag) == 0 && !hasTrace {
		return r.Context() // nothing to extract: skip the propagator
	}
	if size := headerSize(bag); size > a.cfg.baggageLimit {
		a.baggageLog.LogAttrs(r.Context(), slog.LevelWarn, msgBaggageDropped,
			slog.String("operation", name), slog.Int("bytes", size), slog.Int("limit", a.cfg.baggageLimit))
		if !hasTrace {
			return r.Context()
		}
		h = h.Clone()
		delete(h, "Baggage")
	}
	return propagation.ExtractHTTP(r.Context(), h)
}

// msgBaggageDropped is the message of the record of a dropped baggage header.
const msgBaggageDropped = "httpadapter: baggage header dropped"

func headerSize(vs []string) int {
	n := 0
	for _, v := range vs {
		n += len(v)
	}
	return n
}

// codeBadDeadline is the code of a malformed deadline header.
const codeBadDeadline = "KERNEL_VALIDATION_002"

func badDeadline(header string) *pipeline.Error {
	return pipeline.NewError(pipeline.KindValidation, codeBadDeadline,
		fmt.Sprintf("The %s header is malformed: want %s.", header, deadlineFormat(header))).
		WithDetail("field", header)
}

func deadlineFormat(header string) string {
	if header == HeaderDeadline {
		return "one RFC 3339 UTC timestamp such as 2026-03-01T12:00:02.5Z (at most 9 fractional digits)"
	}
	return "one whole number of milliseconds, at most 12 digits"
}

// readBody reads the whole request body, up to the limit, into a pooled
// buffer. Reading to the end matters beyond decoding. Go's HTTP/1 server
// only watches the connection for a vanished client once the body has been
// read to EOF. Only then does it cancel the request's context when the
// client goes.
//
// The read is bounded by deadline, when it is not zero and the connection
// supports read deadlines. A client that sends its headers and then
// dribbles the body gets a 504 at the deadline. It cannot hold the server
// for as long as it likes.
func (a *Adapter) readBody(c echo.Context, deadline time.Time) (*bytes.Buffer, *pipeline.Error, int) {
	r := c.Request()
	buf := bufPool.Get().(*bytes.Buffer)
	if r.Body == nil || r.Body == http.NoBody {
		return buf, nil, 0
	}
	limit := a.cfg.bodyLimit
	if r.ContentLength > limit {
		bufPool.Put(buf)
		return nil, bodyTooLarge(limit), http.StatusRequestEntityTooLarge
	}
	var rc *http.ResponseController
	if !deadline.IsZero() {
		rc = http.NewResponseController(c.Response())
		if rc.SetReadDeadline(deadline) != nil {
			rc = nil // not supported: read without a bound
		}
	}
	_, err := buf.ReadFrom(http.MaxBytesReader(c.Response(), r.Body, limit))
	if err == nil && rc != nil {
		_ = rc.SetReadDeadline(time.Time{}) // the connection's own watch after EOF must not time out
	}
	if err != nil {
		// What is left on the wire is unknown: do not read on for the
		// next request (the read deadline, if it fired, stays expired so
		// that the server's own attempt to drain the body fails at once).
		c.Response().Header().Set(echo.HeaderConnection, "close")
		buf.Reset()
		bufPool.Put(buf)
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return nil, bodyTooLarge(limit), http.StatusRequestEntityTooLarge
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, pipeline.ErrTimeout(), 0
		}
		if ctxErr := r.Context().Err(); ctxErr != nil {
			return nil, pipeline.AsError(ctxErr), 0
		}
		return nil, pipeline.Wrap(pipeline.KindValidation, codeMalformedBody,
			"The request body could not be read.", err), 0
	}
	return buf, nil, 0
}

func bodyTooLarge(limit int64) *pipeline.Error {
	return pipeline.NewError(pipeline.KindValidation, codeBodyTooLarge,
		fmt.Sprintf("The request body is larger than %d bytes.", limit)).WithDetail("limit", limit)
}

// exchange is one request between its arrival and its access log record:
// what the answer needs to write the response and log it. Exchanges are
// pooled; answer is bound once, so that handing it to the kernel costs
// nothing.
type exchange struct {
	a       *Adapter
	c       echo.Context
	start   time.Time
	name    string // the access log's "operation": operation ID, host route or ""
	success int    // an operation's success status; 0: a host endpoint, which wrote its own
	// status, when not 0, is the status of the outcome rejected (the
	// rejection itself, compared by pointer): 413, or an *echo.HTTPError's.
	status   int
	rejected *pipeline.Error
	answer   func(kernel.Outcome) // x.respond, bound once
	statusFn func(error) int      // x.statusOf, bound once
	meta     *operations.Metadata // an operation's call's; nil for a host endpoint
}

var exchangePool = sync.Pool{New: func() any {
	x := &exchange{}
	x.answer, x.statusFn = x.respond, x.statusOf
	return x
}}

func (a *Adapter) newExchange(c echo.Context) *exchange {
	x := exchangePool.Get().(*exchange)
	x.a, x.c, x.start = a, c, time.Now()
	closeAfterChunked(c) // every path the adapter serves (framing.go)
	return x
}

// release returns x to the pool. The kernel has returned from Serve (or
// Invoke), so nothing calls x.answer any more.
func (x *exchange) release() {
	x.a, x.c, x.name, x.success, x.status, x.rejected, x.meta = nil, nil, "", 0, 0, nil, nil
	exchangePool.Put(x)
}

// transport describes the request for the OpenTelemetry semantic
// conventions (kernel.Transport): route is the matched route template,
// "" when none matched.
func (x *exchange) transport(r *http.Request, route string) kernel.Transport {
	scheme, version := "http", "1.1"
	if r.TLS != nil {
		scheme = "https"
	}
	switch r.ProtoMajor {
	case 2:
		version = "2"
	case 1:
		if r.ProtoMinor == 0 {
			version = "1.0"
		}
	}
	return kernel.Transport{Method: r.Method, Route: route, Scheme: scheme, Path: r.URL.Path,
		Host: r.Host, ProtocolVersion: version, Status: x.statusFn}
}

// statusOf is the HTTP status the outcome err (nil: success) is answered
// with, as respond writes it.
func (x *exchange) statusOf(err error) int {
	if err != nil {
		e := pipeline.AsError(err)
		if x.status != 0 && e == x.rejected {
			return x.status
		}
		return StatusFor(e.Kind())
	}
	if x.success != 0 {
		return x.success
	}
	if st := x.c.Response().Status; st != 0 { // a host endpoint wrote its own
		return st
	}
	return http.StatusOK
}

// reject records that e, when it is the outcome, is answered with status
// rather than its kind's.
func (x *exchange) reject(e *pipeline.Error, status int) {
	if status != 0 {
		x.status, x.rejected = status, e
	}
}

// respond writes the outcome of the call and its access log record. The
// kernel calls it exactly once. It runs on the request's goroutine, or on
// another when the answer leaves at the deadline while the handler runs on
// (o.Expired). The request's goroutine then waits in the kernel.
func (x *exchange) respond(o kernel.Outcome) {
	// At the deadline, respond asks an HTTP/1 client to close the
	// connection: the request's goroutine stays busy with the handler, so
	// the connection cannot serve another request before it returns. An
	// HTTP/2 stream holds no one else up, and Connection: close there
	// would make the server drain the whole connection. respond flushes,
	// so that the client has the whole response at once.
	c := x.c
	if o.Expired && c.Request().ProtoMajor < 2 {
		c.Response().Header().Set(echo.HeaderConnection, "close")
	}
	x.sendMetadata(o.Err != nil)
	x.sendReply(o.Invocation)
	switch {
	case o.Err != nil:
		x.fail(pipeline.AsError(o.Err), o.TraceID)
	case x.success == 0:
		// A host endpoint wrote its own response.
		x.log(c.Response().Status, nil, o.TraceID, nil)
	default:
		x.succeed(o.Output, o.TraceID)
	}
	if o.Expired {
		// Logged first, as on the request's goroutine, where the server
		// flushes after the handler returns: the access log keeps the
		// order in which clients saw their responses. A flush error means
		// the client is gone; there is nobody left to tell.
		_ = http.NewResponseController(c.Response()).Flush()
	}
}

// sendReply sets the fields of the invocation's reply as response headers
// (RateLimit-Policy and RateLimit, Idempotent-Replayed, ...), on success
// and failure alike, while the response is not committed. A field that is
// not a valid header, or that names a header of the message's framing or
// connection (header.Owned), is left out.
func (x *exchange) sendReply(inv *pipeline.Invocation) {
	for _, f := range inv.Reply().Fields() {
		if !x.c.Response().Committed && sendableField(f.Name, f.Value) {
			x.c.Response().Header().Set(f.Name, f.Value)
		}
	}
}

// sendMetadata sets the headers the handler set (operations.Metadata) as
// response headers while the response is not committed. Its trailers are
// HTTP trailers after a success; a failure's problem has a length, so
// they are headers then. A header refused to Reply fields is refused.
func (x *exchange) sendMetadata(failed bool) {
	w := x.c.Response()
	if x.meta == nil || w.Committed {
		return
	}
	prefix := http.TrailerPrefix
	if failed {
		prefix = ""
	}
	addFields(w.Header(), "", x.meta.SendHeader())
	addFields(w.Header(), prefix, x.meta.SendTrailer())
}

// addFields adds each sendable field of src to dst, its name prefixed.
func addFields(dst http.Header, prefix string, src http.Header) {
	for k, vs := range src {
		for _, v := range vs {
			if sendableField(k, v) {
				dst.Add(prefix+k, v)
			}
		}
	}
}

// sendableField reports whether a Reply field can be a response header:
// a valid name and value (RFC 9110 section 5) that the server does not own
// (header.Owned): the body's framing and the hop-by-hop headers.
func sendableField(name, value string) bool {
	return httpguts.ValidHeaderFieldName(name) && httpguts.ValidHeaderFieldValue(value) &&
		!header.Owned(name)
}

// succeed writes an operation's output with its success status.
func (x *exchange) succeed(out any, traceID string) {
	c := x.c
	status := x.success
	if status == http.StatusNoContent {
		c.Response().WriteHeader(status)
		x.log(status, nil, traceID, nil)
		return
	}
	body, err := json.Marshal(out)
	if err != nil {
		x.fail(pipeline.Wrap(pipeline.KindUnexpected, pipeline.CodeUnexpected, pipeline.UnexpectedMessage,
			fmt.Errorf("httpadapter: encoding the output of %q: %w", x.name, err)), traceID)
		return
	}
	x.log(status, nil, traceID, c.JSONBlob(status, body))
}

// fail writes e as Problem Details — with the rejection's status when e is
// the rejection, else its kind's — and logs the request. When the
// response is already committed (a host endpoint or an application route
// wrote it) it only logs.
func (x *exchange) fail(e *pipeline.Error, traceID string) {
	status := StatusFor(e.Kind())
	if x.status != 0 && e == x.rejected {
		status = x.status
	}
	if w := x.c.Response(); w.Committed {
		x.log(w.Status, e, traceID, errResponseCommitted)
		return
	}
	x.log(status, e, traceID, writeProblem(x.c, e, status, traceID))
}

var errResponseCommitted = errors.New("httpadapter: response already committed")

// log writes the access log record of the request.
func (x *exchange) log(status int, e *pipeline.Error, traceID string, writeErr error) {
	a, r := x.a, x.c.Request()
	level := slog.LevelInfo
	if e != nil && e.Kind() == pipeline.KindUnexpected {
		level = slog.LevelError
	}
	ctx := r.Context()
	if !a.logger.Enabled(ctx, level) {
		return
	}
	code := ""
	if e != nil {
		code = e.Code()
	}
	attrs := make([]slog.Attr, 0, 10)
	attrs = append(attrs,
		slog.String("operation", x.name),
		slog.String("method", r.Method),
		slog.String("path", r.URL.Path),
		slog.Int("status", status),
		slog.String("code", code),
		slog.Float64("durationMs", float64(time.Since(x.start).Microseconds())/1000),
		slog.String("traceId", traceID),
	)
	if level == slog.LevelError {
		attrs = append(attrs, slog.String("error", pipeline.ErrorText(e)))
	}
	if writeErr != nil {
		attrs = append(attrs, slog.String("writeError", pipeline.ErrorText(writeErr)))
	}
	a.logger.LogAttrs(ctx, level, "http request", attrs...)
}
