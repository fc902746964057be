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
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/trace"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/kernel/telemetry"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience"
)

// Adapter serves a kernel's operations on an echo instance. Create it with
// Mount. It is safe for concurrent use.
type Adapter struct {
	k      *kernel.Kernel
	cfg    config
	logger *slog.Logger

	// guard watches the deadline of invocations that have one, so that
	// the response can leave at the deadline even when the handler ignores
	// its context (see invokeGuarded). Always true outside benchmarks.
	guard bool

	inflight inflight // invocations not yet returned
}

// Mount mounts every operation of k that has an HTTP Method and Path on e,
// which the application owns: its own middleware and routes stay as they
// are. Unless WithoutErrorHandler is given, it also installs the adapter's
// HTTPErrorHandler on e.
//
// Each route reads the caller's deadline (see ParseDeadline and
// WithRelativeDeadlineHeader), reads the body to its end within the body
// limit, binds the JSON body, path parameters and (for GET, HEAD and
// DELETE) query parameters into the operation's input, runs the
// invocation through k, and writes the outcome: the descriptor's success
// status with the JSON output, or Problem Details. It logs one access
// record per request.
//
// Mount fails, naming the operation, when two operations share a method
// and path, or when a path parameter has no field in the input to go to.
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
	a := &Adapter{k: k, cfg: cfg, logger: cfg.logger, guard: true}
	if a.logger == nil {
		a.logger = k.Logger()
	}
	seen := make(map[string]string)
	var routes []*route
	for _, d := range k.Registry().All() {
		if d.Method == "" {
			continue
		}
		if _, ok := k.Lookup(d.ID); !ok {
			continue
		}
		key := d.Method + " " + d.Path
		if other, dup := seen[key]; dup {
			return nil, fmt.Errorf("httpadapter: Mount: operations %q and %q are both mounted on %s", other, d.ID, key)
		}
		seen[key] = d.ID
		rt, err := a.newRoute(d)
		if err != nil {
			return nil, fmt.Errorf("httpadapter: Mount: operation %q (%s): %w", d.ID, key, err)
		}
		routes = append(routes, rt)
	}
	for _, rt := range routes {
		e.Add(rt.desc.Method, rt.desc.Path, rt.serve)
	}
	if cfg.errorHandler {
		e.HTTPErrorHandler = a.HTTPErrorHandler
	}
	return a, nil
}

// route is one mounted operation, planned at Mount.
type route struct {
	a       *Adapter
	desc    *operations.Descriptor
	binder  *binder
	dm      *resilience.DeadlineMiddleware // computes the effective deadline
	success int
}

func (a *Adapter) newRoute(d *operations.Descriptor) (*route, error) {
	b, err := newBinder(d.Input, d.Method, pathParams(d.Path))
	if err != nil {
		return nil, err
	}
	rt := &route{a: a, desc: d, binder: b, success: successStatus(d)}
	if s := a.k.Settings(); s.UseBuiltInMiddleware {
		rt.dm = resilience.NewDeadlineMiddleware(a.k.PolicyFor(d.ID).Timeout, s.MaxTimeout)
	}
	return rt, nil
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

// exchange is what the access log needs to know of one request.
type exchange struct {
	start   time.Time
	name    string // operation ID or host route
	traceID string
	status  int
	err     *pipeline.Error // nil on success
}

// serve handles one request of an operation route. It writes the response
// itself and returns nil, so echo's error handler never sees its outcomes.
func (rt *route) serve(c echo.Context) error {
	a := rt.a
	r := c.Request()
	x := exchange{start: time.Now(), name: rt.desc.ID}
	ctx := a.requestContext(r, rt.desc.ID)
	x.traceID = traceIDOf(trace.SpanContextFromContext(ctx))

	var deadline time.Time
	if a.cfg.callerDeadlines {
		d, header, err := inboundDeadline(r.Header, a.cfg.relHeader, x.start)
		if err != nil {
			a.fail(c, &x, badDeadline(header), 0)
			return nil
		}
		deadline = d
	}
	if rt.dm != nil {
		pd, _ := ctx.Deadline()
		deadline = rt.dm.Effective(x.start, deadline, pd)
	}

	buf, perr, status := a.readBody(c, deadline)
	if perr != nil {
		a.fail(c, &x, perr, status)
		return nil
	}
	in := rt.desc.NewInput()
	perr = rt.binder.bind(r, c.ParamNames(), c.ParamValues(), buf.Bytes(), in)
	buf.Reset()
	bufPool.Put(buf)
	if perr != nil {
		a.fail(c, &x, perr, 0)
		return nil
	}

	var res result
	a.inflight.add()
	if deadline.IsZero() || !a.guard || !deadline.After(x.start) {
		// No deadline, no guard, or a deadline already past (the kernel
		// answers TIMEOUT at once without running the handler): nothing
		// to watch.
		inv := a.newInvocation(ctx, rt.desc, in, deadline, r)
		err := a.k.Invoke(inv)
		res = result{err, inv.Output(), telemetry.TraceID(inv)}
	} else {
		var owned bool
		res, owned = a.invokeGuarded(c, &x, ctx, rt.desc, in, deadline)
		if !owned {
			// The deadline's callback answered; the late result is
			// logged and nothing more may be written.
			a.inflight.done()
			return nil
		}
	}
	a.inflight.done()
	if res.traceID != "" {
		x.traceID = res.traceID
	}
	err, out := res.err, res.out
	if err != nil {
		a.fail(c, &x, pipeline.AsError(err), 0)
		return nil
	}
	x.status = rt.success
	if x.status == http.StatusNoContent {
		c.Response().WriteHeader(x.status)
		a.logExchange(r, &x, nil)
		return nil
	}
	body, merr := json.Marshal(out)
	if merr != nil {
		a.fail(c, &x, pipeline.Wrap(pipeline.KindUnexpected, pipeline.CodeUnexpected, pipeline.UnexpectedMessage,
			fmt.Errorf("httpadapter: encoding the output of %q: %w", rt.desc.ID, merr)), 0)
		return nil
	}
	if werr := c.JSONBlob(x.status, body); werr != nil {
		a.logExchange(r, &x, werr)
		return nil
	}
	a.logExchange(r, &x, nil)
	return nil
}

func (a *Adapter) newInvocation(ctx context.Context, d *operations.Descriptor, in any, deadline time.Time, r *http.Request) *pipeline.Invocation {
	inv := pipeline.NewInvocation(ctx, d, in)
	inv.SetProtocol(pipeline.ProtocolHTTP)
	inv.SetDeadline(deadline)
	a.setBaggage(inv, r)
	return inv
}

// requestContext is the invocation's parent context: the request's (which
// ends when the client goes away), carrying the caller's W3C trace context
// and baggage (telemetry.ExtractHTTP), so that the invocation's span
// continues the caller's trace. A baggage header over the limit is
// dropped whole, with a warning, before anything parses it.
func (a *Adapter) requestContext(r *http.Request, name string) context.Context {
	h := r.Header
	bag, hasTrace := h["Baggage"], len(h["Traceparent"]) > 0
	if len(bag) == 0 && !hasTrace {
		return r.Context() // nothing to extract: skip the propagator
	}
	if size := headerSize(bag); size > a.cfg.baggageLimit {
		a.logger.LogAttrs(r.Context(), slog.LevelWarn, "httpadapter: baggage header dropped",
			slog.String("operation", name), slog.Int("bytes", size), slog.Int("limit", a.cfg.baggageLimit))
		if !hasTrace {
			return r.Context()
		}
		h = h.Clone()
		delete(h, "Baggage")
	}
	return telemetry.ExtractHTTP(r.Context(), h)
}

func headerSize(vs []string) int {
	n := 0
	for _, v := range vs {
		n += len(v)
	}
	return n
}

func badDeadline(header string) *pipeline.Error {
	return pipeline.Errorf(pipeline.KindValidation, pipeline.CodeBadDeadline,
		"The %s header is malformed: want %s.", header, deadlineFormat(header)).
		WithDetail("field", header)
}

func deadlineFormat(header string) string {
	if header == HeaderDeadline {
		return "one RFC 3339 UTC timestamp such as 2026-03-01T12:00:02.5Z (at most 9 fractional digits)"
	}
	return "one whole number of milliseconds, at most 12 digits"
}

// readBody reads the whole request body, up to the limit, into a pooled
// buffer. Reading to the end matters beyond decoding: Go's HTTP/1 server
// only starts watching the connection for a vanished client — and cancels
// the request's context when it goes — once the body has been read to EOF.
//
// The read is bounded by the invocation's deadline (when the connection
// supports read deadlines): a client that sends its headers and then
// dribbles the body gets a 504 at the deadline instead of holding the
// server for as long as it likes.
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
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, bodyTooLarge(limit), http.StatusRequestEntityTooLarge
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, pipeline.ErrTimeout(), 0
		}
		if ctxErr := r.Context().Err(); ctxErr != nil {
			return nil, pipeline.AsError(ctxErr), 0
		}
		return nil, pipeline.Wrap(pipeline.KindValidation, CodeMalformedBody,
			"The request body could not be read.", err), 0
	}
	return buf, nil, 0
}

func bodyTooLarge(limit int64) *pipeline.Error {
	return pipeline.Errorf(pipeline.KindValidation, CodeBodyTooLarge,
		"The request body is larger than %d bytes.", limit).WithDetail("limit", limit)
}

// setBaggage copies the baggage extracted by requestContext onto the
// invocation (bounded: see telemetry.CopyBaggage), and the Idempotency-Key
// header, when the baggage carries no idempotency key.
func (a *Adapter) setBaggage(inv *pipeline.Invocation, r *http.Request) {
	telemetry.CopyBaggage(inv.Context(), inv, a.logger)
	if k := r.Header.Get("Idempotency-Key"); k != "" && len(k) <= maxIdempotencyKey && inv.IdempotencyKey() == "" {
		inv.SetBaggage(pipeline.BaggageIdempotencyKey, k)
	}
}

// fail writes e as Problem Details (status 0: the kind's) and logs the
// exchange.
func (a *Adapter) fail(c echo.Context, x *exchange, e *pipeline.Error, status int) {
	if status == 0 {
		status = StatusFor(e.Kind)
	}
	x.status, x.err = status, e
	werr := writeProblem(c, e, status, x.traceID)
	a.logExchange(c.Request(), x, werr)
}

// logExchange writes the access log record of one request.
func (a *Adapter) logExchange(r *http.Request, x *exchange, writeErr error) {
	level := slog.LevelInfo
	if x.err != nil && x.err.Kind == pipeline.KindUnexpected {
		level = slog.LevelError
	}
	ctx := r.Context()
	if !a.logger.Enabled(ctx, level) {
		return
	}
	code := ""
	if x.err != nil {
		code = x.err.Code
	}
	attrs := make([]slog.Attr, 0, 10)
	attrs = append(attrs,
		slog.String("operation", x.name),
		slog.String("method", r.Method),
		slog.String("path", r.URL.Path),
		slog.Int("status", x.status),
		slog.String("code", code),
		slog.Float64("durationMs", float64(time.Since(x.start).Microseconds())/1000),
		slog.String("traceId", x.traceID),
	)
	if x.err != nil && x.err.Kind == pipeline.KindUnexpected {
		attrs = append(attrs, slog.String("error", x.err.Error()))
	}
	if writeErr != nil {
		attrs = append(attrs, slog.String("writeError", writeErr.Error()))
	}
	a.logger.LogAttrs(ctx, level, "http request", attrs...)
}

type result struct {
	err     error
	out     any
	traceID string // the invocation's span, if the Diagnostics stage recorded one
}

// lateWarnAfter is how late after the response a discarded result must be
// for its log record to be a warning rather than information: a handler
// that honours its context returns within microseconds of the deadline,
// one that ignores it does not.
const lateWarnAfter = 10 * time.Millisecond

// settleWindow is how long the adapter waits, once the invocation's
// context has ended, for the kernel's outcome before it answers without it
// (a handler that ignores its context). It bounds how late after the
// deadline a 504 can leave.
const settleWindow = 5 * time.Millisecond

// Who owns the response of a guarded invocation. It starts armed; the
// request's goroutine (the outcome came first) or the deadline's callback
// (it did not come within the settle window) claims it with a CAS, and
// only the winner touches the ResponseWriter and logs the access record.
const (
	watchArmed    int32 = iota
	watchOutcome        // the request's goroutine writes the kernel's outcome
	watchDeadline       // the callback wrote 504 (408) without it
)

// watch is the deadline's side of one guarded invocation. The request's
// goroutine recycles it when it stopped the callback before it started;
// once the callback has started, the watch is left to the garbage
// collector, since the callback may still read it after serve returned.
type watch struct {
	state atomic.Int32
	// mu is held by the callback from its CAS until it has written,
	// logged and flushed the response: the request's goroutine, having
	// lost the CAS, takes it to wait until the ResponseWriter is no longer
	// in use before serve returns.
	mu     sync.Mutex
	gaveUp time.Time // when the callback answered; under mu

	a    *Adapter
	c    echo.Context
	ctx  context.Context // the invocation's parent: ends at the deadline or with the client
	x    exchange        // the access record as it stood when the watch was armed
	fire func()          // w.respond, bound once
}

var watchPool = sync.Pool{New: func() any {
	w := &watch{}
	w.fire = w.respond
	return w
}}

func (w *watch) recycle() {
	w.state.Store(watchArmed)
	w.a, w.c, w.ctx, w.x, w.gaveUp = nil, nil, nil, exchange{}, time.Time{}
	watchPool.Put(w)
}

// invokeGuarded runs inv on the request's goroutine under a parent context
// that ends at the deadline (or when the client goes away), with a
// context.AfterFunc armed on that parent. Because the kernel's
// DeadlineMiddleware derives the handler's context from the same parent,
// the adapter and the kernel read the same token.
//
// When the invocation returns first — the usual case — the callback is
// stopped before it ever runs: no goroutine, no timer beyond the parent's
// own, and invokeGuarded returns the outcome with owned true.
//
// When the parent ends first, the callback waits settleWindow for the
// outcome (a handler that honours its context returns within microseconds
// of the deadline, and its outcome carries its span's trace ID), then, if
// the request's goroutine has not claimed the response meanwhile, claims it
// and writes 504 TIMEOUT (408 CANCELLED when the client is gone), with
// Connection: close over HTTP/1, logs the access record, and flushes it so
// that the client has it at once. The invocation runs on until the handler
// returns, keeping its concurrency slot — and its request's goroutine, so
// that http.Server.Shutdown waits for it like any other request — and
// invokeGuarded then discards and logs its result and returns owned
// false: the caller must write nothing.
func (a *Adapter) invokeGuarded(c echo.Context, x *exchange, ctx context.Context, d *operations.Descriptor, in any, deadline time.Time) (result, bool) {
	r := c.Request()
	dctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	inv := a.newInvocation(dctx, d, in, deadline, r)
	w := watchPool.Get().(*watch)
	w.a, w.c, w.ctx, w.x = a, c, dctx, *x
	stop := context.AfterFunc(dctx, w.fire)
	err := a.k.Invoke(inv)
	if stop() {
		w.recycle()
		return result{err, inv.Output(), telemetry.TraceID(inv)}, true
	}
	if w.state.CompareAndSwap(watchArmed, watchOutcome) {
		// Within the settle window: the kernel's outcome wins.
		return result{err, inv.Output(), telemetry.TraceID(inv)}, true
	}
	w.mu.Lock() // the callback owns the response: wait until it is done with it
	gaveUp := w.gaveUp
	w.mu.Unlock()
	a.logLate(inv.Name(), r.Method, r.URL.Path, gaveUp, err, inv.OriginalOutcome())
	return result{}, false
}

// respond is the callback of a guarded invocation whose parent context
// ended before the invocation returned.
func (w *watch) respond() {
	time.Sleep(settleWindow) // only ever after the deadline: no timer on the common path
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.state.CompareAndSwap(watchArmed, watchDeadline) {
		return // the outcome came in time; w may already belong to nobody
	}
	w.gaveUp = time.Now()
	e := pipeline.ErrCancelled()
	if w.ctx.Err() == context.DeadlineExceeded {
		e = pipeline.ErrTimeout()
	}
	c, x := w.c, &w.x
	// The request's goroutine stays busy with the handler: an HTTP/1
	// connection cannot serve another request before it returns, so end it
	// after this response rather than leave the client's next request
	// waiting. (An HTTP/2 stream holds no one else up, and Connection:
	// close there would make the server drain the whole connection.)
	if c.Request().ProtoMajor < 2 {
		c.Response().Header().Set(echo.HeaderConnection, "close")
	}
	x.status, x.err = StatusFor(e.Kind), e
	w.a.logExchange(c.Request(), x, writeProblem(c, e, x.status, x.traceID))
	// Logged first, as on the request's goroutine, where the server
	// flushes after serve returns: the access log keeps the order in which
	// clients saw their responses. A flush error means the client is gone;
	// there is nobody left to tell.
	_ = http.NewResponseController(c.Response()).Flush()
}

func (a *Adapter) logLate(name, method, path string, gaveUp time.Time, err, original error) {
	late := time.Since(gaveUp)
	level := slog.LevelInfo
	if late >= lateWarnAfter {
		level = slog.LevelWarn
	}
	a.logger.LogAttrs(context.Background(), level, "httpadapter: late result discarded",
		slog.String("operation", name),
		slog.String("method", method),
		slog.String("path", path),
		slog.Float64("lateByMs", float64(late.Microseconds())/1000),
		slog.String("code", pipeline.CodeOf(err)),
		slog.String("handlerCode", pipeline.CodeOf(original)),
	)
}

// inflight counts invocations that have not returned yet. It is a bare
// counter so that the hot path pays one atomic add; Wait polls it.
type inflight struct {
	n atomic.Int64
}

func (f *inflight) add()  { f.n.Add(1) }
func (f *inflight) done() { f.n.Add(-1) }

// waitPoll is how often Wait looks at the counter.
const waitPoll = 5 * time.Millisecond

// Wait blocks until every invocation the adapter has started has returned
// — including handlers that outlived their response because they ignored
// their context — or ctx ends, and returns an error wrapping ctx's in the
// latter case.
//
// Invocations run on their request's goroutine, so http.Server.Shutdown
// already waits for them, stragglers included: a straggler's connection
// stays active until its handler returns, and is closed then (its
// response said Connection: close). Wait matters when Shutdown gave up —
// its context ended, or Server.Close cut the connections, which does not
// stop handlers — and for servers that do not wait at all. Call it after
// Shutdown, within the same grace period, so that a shutdown does not cut
// stragglers off silently. It polls every few milliseconds: it is meant
// for shutdown, not for the hot path.
func (a *Adapter) Wait(ctx context.Context) error {
	if a.inflight.n.Load() == 0 {
		return nil
	}
	t := time.NewTicker(waitPoll)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			if a.inflight.n.Load() == 0 {
				return nil
			}
		case <-ctx.Done():
			return fmt.Errorf("httpadapter: %d invocations still running: %w", a.inflight.n.Load(), ctx.Err())
		}
	}
}
