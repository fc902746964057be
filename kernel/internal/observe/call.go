package observe

import (
	"context"
	"log/slog"
	"reflect"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience/deadline"
)

// Call is one observed invocation, from [Op.Start] to [Call.End]. A nil
// *Call is an invocation nothing observes: its methods do nothing.
type Call struct {
	o         *Op
	inv       *pipeline.Invocation
	in        *instruments // nil: metrics disabled
	proto     int
	parent    context.Context
	ctx       context.Context // parent with the span, if any
	span      trace.Span      // nil without a tracer
	start     time.Time
	budget    time.Duration
	hasBudget bool
	tr        transport // the protocol request, for the semantic conventions
	ended     atomic.Bool
	stream    *StreamEnd // how the call's stream ended; nil: no stream
}

// StreamEnd is how a call's stream ended.
type StreamEnd struct {
	Reason         string
	Sent, Received int64
}

// Stream records how the call's stream ended, for End. It does nothing
// on a nil Call.
func (c *Call) Stream(e StreamEnd) {
	if c != nil {
		c.stream = &e
	}
}

// StreamOpened adds delta (1 or -1) to the operation's open streams. It
// does nothing on a nil Op or with the instruments disabled.
func (o *Op) StreamOpened(ctx context.Context, delta int64) {
	if o == nil || !o.t.inst.enabled(ctx) {
		return
	}
	o.t.inst.streamsOpen.Add(ctx, delta, metric.WithAttributes(o.idMAttr))
}

// Start starts observing inv, which arrived at start. When a tracer is
// installed, it starts the invocation's span as a child of ctx's span
// context. That is a local span, or a caller's extracted with
// [propagation.ExtractHTTP] or [propagation.ExtractGRPC]. Start returns ctx
// carrying the span. Run the invocation under that context, so that outbound
// calls continue its trace. End the returned Call with the invocation's
// outcome.
//
// Nothing may observe the invocation: no tracer, the instruments disabled (as
// with otel's no-op default) and no access log. Then, or when o is nil, Start
// returns ctx and a nil *Call, and allocates nothing.
func (o *Op) Start(ctx context.Context, inv *pipeline.Invocation, start time.Time) (context.Context, *Call) {
	return o.StartTransport(ctx, inv, start, nil)
}

// StartTransport is Start for an invocation whose protocol request tr
// describes (nil: none). The span and the conventions' duration metric then
// also carry the conventions' HTTP or RPC server attributes. That metric is
// MetricHTTPServerDuration or MetricRPCServerDuration.
func (o *Op) StartTransport(ctx context.Context, inv *pipeline.Invocation, start time.Time, tr *Transport) (context.Context, *Call) {
	if o == nil {
		return ctx, nil
	}
	tracer := o.t.tracer()
	in := o.t.inst
	if !in.enabled(ctx) {
		in = nil
	}
	if tracer == nil && in == nil && o.t.access == nil {
		return ctx, nil
	}
	c := &Call{o: o, inv: inv, in: in, proto: protoSlot(inv.Protocol()), parent: ctx, ctx: ctx, start: start}
	if d := inv.Timing().CallerDeadline; !d.IsZero() {
		c.budget, c.hasBudget = d.Sub(start), true
	}
	if tr != nil {
		c.tr = transport(*tr)
	}
	if tracer != nil {
		name := inv.Name()
		if name == "" {
			name = o.name
		}
		opts := make([]trace.SpanStartOption, 0, len(o.start[c.proto])+2)
		opts = append(opts, o.start[c.proto]...)
		opts = append(opts, trace.WithTimestamp(start))
		if sa := c.tr.startAttrs(); sa != nil {
			opts = append(opts, trace.WithAttributes(sa...))
		}
		c.ctx, c.span = tracer.Start(ctx, name, opts...)
	}
	return c.ctx, c
}

// TraceID returns the trace ID to report for the invocation (Problem Details
// "traceId", logs). That is its span's, or the caller's when no span was
// recorded, or "". The caller's comes with the context given to Start (an
// incoming traceparent). TraceID returns "" for a nil Call.
func (c *Call) TraceID() string {
	if c == nil {
		return ""
	}
	if sc := trace.SpanContextFromContext(c.ctx); sc.HasTraceID() {
		return sc.TraceID().String()
	}
	return ""
}

// End finishes observing the invocation at end. Its attributed outcome, what
// its caller is told, is err (nil for success). End ends the span, records
// the metrics and writes the access-log line. Only the first call of End has
// an effect; on a nil Call it does nothing.
//
// When err is the TIMEOUT or CANCELLED outcome the kernel attributed over
// another one, it wraps that one as its cause. The span and the access log
// then report that original outcome beside the attributed one.
func (c *Call) End(err error, end time.Time) {
	if c == nil || !c.ended.CompareAndSwap(false, true) {
		return
	}
	var e ending
	c.settle(&e, err, end)
	if c.span != nil {
		if c.span.IsRecording() {
			c.annotate(&e, end)
		}
		c.span.End(trace.WithTimestamp(end))
	}
	if c.in != nil {
		c.record(&e, end)
	}
	if l := c.o.t.access; l != nil {
		c.log(l, e.kind, e.perr, e.orig, end)
	}
}

// ending is what End derives once from the outcome, for the span, the
// metrics and the access log.
type ending struct {
	perr *pipeline.Error // the attributed outcome; nil: success
	orig *pipeline.Error // the outcome the attribution replaced, or nil
	kind pipeline.Kind
	a    *outcomeAttrs
	// reason is the index in reasons of the limit that rejected the
	// call, or -1.
	reason int
	// deadline is the invocation's deadline, if hasDeadline; fired
	// reports that it fired (the outcome is KERNEL_TIMEOUT_001).
	deadline           time.Time
	hasDeadline, fired bool
	// sem reports that the conventions' attributes (semAttrs) and
	// duration point (semKey) are recorded.
	sem      bool
	semAttrs []attribute.KeyValue
	semKey   semconvKey
}

// settle fills e in from the attributed outcome err, at end.
func (c *Call) settle(e *ending, err error, end time.Time) {
	e.perr = pipeline.AsError(err)
	code := ""
	e.kind = pipeline.KindOK
	if e.perr != nil {
		e.kind, code = e.perr.Kind(), e.perr.Code()
	}
	e.a = c.o.outcome(c.proto, e.kind, code)
	e.reason = -1
	if e.kind == pipeline.KindUnavailable {
		e.reason = rejectionReason(code)
	}
	e.orig = original(e.perr)
	e.deadline, e.hasDeadline = c.inv.Deadline()
	e.fired = e.kind == pipeline.KindTimeout && code == pipeline.CodeTimeout && e.hasDeadline && !e.deadline.After(end)
	e.sem = (c.tr.isHTTP() || c.tr.isRPC()) && (c.span != nil || c.in != nil)
	if e.sem {
		e.semAttrs, e.semKey = c.tr.endAttrs(c.tr.status(err))
	}
}

// record records the metrics of the ended invocation.
func (c *Call) record(e *ending, end time.Time) {
	in := c.in
	secs := end.Sub(c.start).Seconds()
	in.duration.Record(c.ctx, secs, e.a.rec...)
	if e.sem {
		h := in.httpDur
		if e.semKey.rpc {
			h = in.rpcDur
		}
		h.Record(c.ctx, secs, c.o.t.semconv.get(e.semKey)...)
	}
	if e.reason >= 0 {
		in.rejected.Add(c.ctx, 1, c.o.rejected[e.reason]...)
	}
	if c.hasBudget {
		in.remaining.Record(c.ctx, max(c.budget, 0).Seconds(), c.o.remaining[c.proto]...)
	}
	if c.inv.Reply().Replayed() {
		in.replays.Add(c.ctx, 1, c.o.replays[c.proto]...)
	}
	if s := c.stream; s != nil {
		in.streamEnds.Add(c.ctx, 1, metric.WithAttributes(c.o.idMAttr, attribute.String(MetricAttrEndReason, s.Reason)))
	}
}

// original returns the outcome the kernel's deadline attribution replaced
// with perr. That is the cause of a KERNEL_TIMEOUT_001 or
// KERNEL_CANCELLED_001 outcome, as the handler returned it and the breaker
// classified it. It returns nil when perr is no such outcome, or its cause
// has the same code.
func original(perr *pipeline.Error) *pipeline.Error {
	if perr == nil {
		return nil
	}
	cause := deadline.Original(perr)
	if cause == nil || cause == error(perr) {
		return nil
	}
	if o := pipeline.AsError(cause); o.Code() != perr.Code() {
		return o
	}
	return nil
}

// annotate adds the outcome's attributes (the conventions' ones
// included), events and status to a recording span, the attributes in
// one call.
func (c *Call) annotate(e *ending, end time.Time) {
	c.span.SetAttributes(c.spanAttrs(e)...)
	if e.reason >= 0 {
		c.rejectionEvent(e, end)
	}
	if e.fired {
		c.deadlineEvent(e.deadline)
	}
	if e.perr != nil {
		c.errorStatus(e.perr, end)
	}
}

// spanAttrs returns the span attributes of the ended invocation.
func (c *Call) spanAttrs(e *ending) []attribute.KeyValue {
	attrs := make([]attribute.KeyValue, 0, len(e.a.span)+len(e.semAttrs)+8)
	attrs = append(attrs, e.a.span...)
	if !c.o.route {
		attrs = append(attrs, priorityAttr(c.inv.Priority()))
	}
	attrs = append(attrs, e.semAttrs...)
	if e.orig != nil {
		attrs = append(attrs, attribute.String(AttrOriginalKind, e.orig.Kind().String()), attribute.String(AttrOriginalCode, e.orig.Code()))
	}
	if e.hasDeadline {
		attrs = append(attrs, attribute.String(AttrDeadline, e.deadline.UTC().Format(time.RFC3339Nano)))
	}
	if c.hasBudget {
		attrs = append(attrs, attribute.Int64(AttrDeadlineBudgetMs, c.budget.Milliseconds()))
	}
	if c.inv.IdempotencyKey() != "" {
		attrs = append(attrs, attribute.Bool(AttrIdempotencyKey, true))
	}
	if c.inv.Reply().Replayed() {
		attrs = append(attrs, attribute.Bool(AttrIdempotencyReplayed, true))
	}
	if s := c.stream; s != nil {
		attrs = append(attrs, attribute.String(AttrStreamEndReason, s.Reason),
			attribute.Int64(AttrStreamSent, s.Sent), attribute.Int64(AttrStreamReceived, s.Received))
	}
	return attrs
}

// rejectionEvent adds the event of a call a limit rejected: which limit,
// and its retry hint.
func (c *Call) rejectionEvent(e *ending, end time.Time) {
	ev := []attribute.KeyValue{attribute.String(AttrRejectionLimit, reasons[e.reason])}
	if s, ok := retryAfterSeconds(e.perr); ok {
		ev = append(ev, attribute.Int64(AttrRetryAfter, s))
	}
	c.span.AddEvent(EventRejection, trace.WithAttributes(ev...), trace.WithTimestamp(end))
}

// deadlineEvent adds the event of the deadline firing, at its instant (or
// at the call's arrival, when it had already passed).
func (c *Call) deadlineEvent(deadline time.Time) {
	at := deadline
	onArrival := !deadline.After(c.start)
	if onArrival {
		at = c.start
	}
	c.span.AddEvent(EventDeadlineExceeded, trace.WithTimestamp(at), trace.WithAttributes(
		attribute.String(AttrDeadline, deadline.UTC().Format(time.RFC3339Nano)),
		attribute.Bool(AttrDeadlineOnArrival, onArrival)))
}

// errorStatus sets the span's status Error, and records the cause of an
// UNEXPECTED outcome as an exception event.
func (c *Call) errorStatus(perr *pipeline.Error, end time.Time) {
	// The description shows what a caller sees: an UNEXPECTED outcome's
	// message is the generic one.
	msg := perr.Message()
	if perr.Kind() == pipeline.KindUnexpected {
		msg = pipeline.UnexpectedMessage
	}
	c.span.SetStatus(codes.Error, perr.Code()+": "+msg)
	if cause := perr.Unwrap(); perr.Kind() == pipeline.KindUnexpected && cause != nil {
		// Operators, not callers, read traces: the real error helps.
		// This is span.RecordError, with the text read by
		// pipeline.ErrorText: an Error method that panics must not
		// take the process down.
		c.span.AddEvent("exception", trace.WithTimestamp(end), trace.WithAttributes(
			attribute.String("exception.type", typeName(cause)),
			attribute.String("exception.message", pipeline.ErrorText(cause))))
	}
}

// typeName returns the package path and name of v's type, as the SDK's
// RecordError reports it.
func typeName(v any) string {
	t := reflect.TypeOf(v)
	if t.PkgPath() == "" && t.Name() == "" {
		return t.String() // a pointer or another unnamed type
	}
	return t.PkgPath() + "." + t.Name()
}

// log writes the access-log line of the invocation.
func (c *Call) log(l *slog.Logger, kind pipeline.Kind, perr, orig *pipeline.Error, end time.Time) {
	level := slog.LevelInfo
	if kind == pipeline.KindUnexpected {
		level = slog.LevelError
	}
	ctx := c.parent
	if !l.Enabled(ctx, level) {
		return
	}
	attrs := make([]slog.Attr, 0, 12)
	if !c.o.route {
		attrs = append(attrs, slog.String("operation", c.o.name))
	} else {
		route := c.inv.Name()
		if route == "" {
			route = c.o.name
		}
		attrs = append(attrs, slog.String("route", route))
	}
	attrs = append(attrs,
		slog.String("protocol", c.inv.Protocol().String()),
		slog.String("kind", kind.String()))
	if perr != nil {
		attrs = append(attrs, slog.String("code", perr.Code()))
	}
	if orig != nil {
		attrs = append(attrs, slog.String("original_kind", orig.Kind().String()), slog.String("original_code", orig.Code()))
	}
	if s, ok := retryAfterSeconds(perr); ok {
		attrs = append(attrs, slog.Int64("retry_after_s", s))
	}
	if c.inv.Reply().Replayed() {
		attrs = append(attrs, slog.Bool("replayed", true))
	}
	if s := c.stream; s != nil {
		attrs = append(attrs, slog.String("stream_end", s.Reason),
			slog.Int64("messages_sent", s.Sent), slog.Int64("messages_received", s.Received))
	}
	attrs = append(attrs, slog.Duration("duration", end.Sub(c.start)))
	sc := trace.SpanContextFromContext(c.ctx)
	if sc.HasTraceID() {
		attrs = append(attrs, slog.String("trace_id", sc.TraceID().String()))
	}
	if sc.HasSpanID() {
		attrs = append(attrs, slog.String("span_id", sc.SpanID().String()))
	}
	l.LogAttrs(ctx, level, "sundial: invocation", attrs...)
}

// retryAfterSeconds returns e's retry-after in whole seconds, rounded up
// and at least 1, as the adapters send it, and whether e has one.
func retryAfterSeconds(e *pipeline.Error) (int64, bool) {
	d, ok := e.RetryAfter()
	return max(1, int64((d+time.Second-1)/time.Second)), ok
}
