package telemetry

import (
	"context"
	"log/slog"
	"math"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/sundial-go/sundial/pipeline"
)

// middleware is the Diagnostics middleware of one operation (op not nil)
// or of the host endpoints (op nil: attributes by route).
type middleware struct {
	t  *Telemetry
	op *opTelemetry
}

// Invoke implements pipeline.Middleware. When tracing is off, the
// instruments are disabled and there is no access log, it only calls next
// (after exposing an idempotency key, when the invocation has one).
func (m *middleware) Invoke(inv *pipeline.Invocation, next pipeline.Handler) error {
	if key := inv.IdempotencyKey(); key != "" {
		return m.withIdempotencyKey(inv, next, key)
	}
	return m.invoke(inv, next)
}

// withIdempotencyKey puts the invocation's idempotency key into the W3C
// baggage of its context, for typed handlers (which see only the context:
// see IdempotencyKey) and for outbound calls (the propagators send it on).
func (m *middleware) withIdempotencyKey(inv *pipeline.Invocation, next pipeline.Handler, key string) error {
	parent := inv.Context()
	b := baggage.FromContext(parent)
	if b.Member(pipeline.BaggageIdempotencyKey).Value() != key {
		if mem, err := baggage.NewMemberRaw(pipeline.BaggageIdempotencyKey, key); err == nil {
			if b2, err := b.SetMember(mem); err == nil {
				inv.SetContext(baggage.ContextWithBaggage(parent, b2))
				defer inv.SetContext(parent)
			}
		}
	}
	return m.invoke(inv, next)
}

func (m *middleware) invoke(inv *pipeline.Invocation, next pipeline.Handler) error {
	tracer := m.t.tracer()
	in := m.t.inst
	if !in.enabled(inv.Context()) {
		in = nil
	}
	if tracer == nil && in == nil && m.t.access == nil {
		return next(inv)
	}
	return m.observe(inv, next, tracer, in)
}

// call is the state of one observed invocation.
type call struct {
	inv       *pipeline.Invocation
	o         *opTelemetry
	proto     int
	parent    context.Context
	ctx       context.Context
	span      trace.Span
	start     time.Time
	budget    time.Duration
	hasBudget bool
}

func (m *middleware) observe(inv *pipeline.Invocation, next pipeline.Handler, tracer trace.Tracer, in *instruments) error {
	c := call{inv: inv, o: m.op, proto: protoSlot(inv.Protocol()), parent: inv.Context()}
	name := inv.Name()
	if c.o == nil {
		c.o = m.t.route(name)
	}
	c.start = time.Now()
	c.budget, c.hasBudget = arrivalBudget(inv, c.parent, c.start)
	c.ctx = c.parent
	if tracer != nil {
		c.ctx, c.span = tracer.Start(c.parent, name, c.o.start[c.proto]...)
		if sc := c.span.SpanContext(); sc.HasTraceID() {
			inv.SetTraceID(sc.TraceID().String())
		}
		inv.SetContext(c.ctx)
	}
	finished := false
	defer func() {
		if !finished {
			// next panicked (application middleware; the handler's panics
			// are recovered inside). Record it and let the panic go on to
			// the kernel's Recover with its stack intact.
			m.finish(&c, in, pipeline.NewError(pipeline.KindUnexpected, pipeline.CodeUnexpected, "panic"))
		}
	}()
	err := next(inv)
	finished = true
	m.finish(&c, in, err)
	return err
}

// arrivalBudget returns how long remained until the caller's deadline (the
// invocation's, or the parent context's if earlier) at now.
func arrivalBudget(inv *pipeline.Invocation, parent context.Context, now time.Time) (time.Duration, bool) {
	d, ok := inv.Deadline()
	if pd, pok := parent.Deadline(); pok && (!ok || pd.Before(d)) {
		d, ok = pd, true
	}
	if !ok {
		return 0, false
	}
	return d.Sub(now), true
}

// finish ends the span, records the metrics and writes the access log for
// the attributed outcome err.
func (m *middleware) finish(c *call, in *instruments, err error) {
	end := time.Now()
	inv := c.inv
	if c.span != nil {
		inv.SetContext(c.parent)
	}
	kind := pipeline.KindOf(err)
	var perr *pipeline.Error
	code := ""
	if err != nil {
		perr = pipeline.AsError(err)
		code = perr.Code
	}
	a := c.o.outcome(c.proto, kind, code)
	reason := -1
	if kind == pipeline.KindUnavailable {
		reason = rejectionReason(code)
	}
	// The original outcome is what the handler returned and the breaker
	// counted; report it only when attribution changed it.
	var orig *pipeline.Error
	if o := inv.OriginalOutcome(); o != nil && err != nil && o != err {
		if oe := pipeline.AsError(o); oe.Code != code {
			orig = oe
		}
	}
	deadline, hasDeadline := inv.Deadline()
	fired := kind == pipeline.KindTimeout && code == pipeline.CodeTimeout && hasDeadline && !deadline.After(end)

	if c.span != nil {
		if c.span.IsRecording() {
			m.annotate(c, a, perr, orig, reason, fired, deadline, hasDeadline, end)
		}
		c.span.End(trace.WithTimestamp(end))
	}
	if in != nil {
		in.count.Add(c.ctx, 1, a.add...)
		in.duration.Record(c.ctx, end.Sub(c.start).Seconds(), a.rec...)
		if reason >= 0 {
			in.rejected.Add(c.ctx, 1, c.o.rejected[reason]...)
		}
		if c.hasBudget {
			in.remaining.Record(c.ctx, max(c.budget, 0).Seconds(), c.o.remaining[c.proto]...)
		}
	}
	if l := m.t.access; l != nil {
		m.log(l, c, kind, perr, orig, end)
	}
}

// annotate adds the outcome's attributes, events and status to a recording
// span.
func (m *middleware) annotate(c *call, a *outcomeAttrs, perr, orig *pipeline.Error, reason int, fired bool, deadline time.Time, hasDeadline bool, end time.Time) {
	span := c.span
	attrs := make([]attribute.KeyValue, 0, len(a.span)+6)
	attrs = append(attrs, a.span...)
	if orig != nil {
		attrs = append(attrs, attribute.String(AttrOriginalKind, orig.Kind.String()), attribute.String(AttrOriginalCode, orig.Code))
	}
	if hasDeadline {
		attrs = append(attrs, attribute.String(AttrDeadline, deadline.UTC().Format(time.RFC3339Nano)))
	}
	if c.hasBudget {
		attrs = append(attrs, attribute.Int64(AttrDeadlineBudgetMs, c.budget.Milliseconds()))
	}
	if c.inv.IdempotencyKey() != "" {
		attrs = append(attrs, attribute.Bool(AttrIdempotencyKey, true))
	}
	span.SetAttributes(attrs...)
	if reason >= 0 {
		ev := []attribute.KeyValue{attribute.String(AttrRejectionLimit, reasons[reason])}
		if s, ok := retryAfterSeconds(perr); ok {
			ev = append(ev, attribute.Int64(AttrRetryAfter, s))
		}
		span.AddEvent(EventRejection, trace.WithAttributes(ev...), trace.WithTimestamp(end))
	}
	if fired {
		at := deadline
		onArrival := !deadline.After(c.start)
		if onArrival {
			at = c.start
		}
		span.AddEvent(EventDeadlineExceeded, trace.WithTimestamp(at), trace.WithAttributes(
			attribute.String(AttrDeadline, deadline.UTC().Format(time.RFC3339Nano)),
			attribute.Bool(AttrDeadlineOnArrival, onArrival)))
	}
	if perr != nil {
		span.SetStatus(codes.Error, perr.Code+": "+perr.SafeMessage())
		if perr.Kind == pipeline.KindUnexpected && perr.Unwrap() != nil {
			// Operators, not callers, read traces: the real error helps.
			span.RecordError(perr.Unwrap(), trace.WithTimestamp(end))
		}
	}
}

// retryAfterSeconds reads details.retryAfter as whole seconds.
func retryAfterSeconds(e *pipeline.Error) (int64, bool) {
	if e == nil {
		return 0, false
	}
	v, ok := e.Detail("retryAfter")
	if !ok {
		return 0, false
	}
	switch n := v.(type) {
	case int:
		return int64(n), true
	case int32:
		return int64(n), true
	case int64:
		return n, true
	case uint:
		return int64(min(uint64(n), math.MaxInt64)), true
	case uint32:
		return int64(n), true
	case uint64:
		return int64(min(n, math.MaxInt64)), true
	case float64:
		return int64(math.Ceil(n)), true
	case float32:
		return int64(math.Ceil(float64(n))), true
	case time.Duration:
		return int64(math.Ceil(n.Seconds())), true
	}
	return 0, false
}

// log writes the access-log line of one invocation.
func (m *middleware) log(l *slog.Logger, c *call, kind pipeline.Kind, perr, orig *pipeline.Error, end time.Time) {
	level := slog.LevelInfo
	if kind == pipeline.KindUnexpected {
		level = slog.LevelError
	}
	ctx := c.parent
	if !l.Enabled(ctx, level) {
		return
	}
	attrs := make([]slog.Attr, 0, 10)
	if c.inv.Operation() != nil {
		attrs = append(attrs, slog.String("operation", c.o.name))
	} else {
		attrs = append(attrs, slog.String("route", c.inv.Route()))
	}
	attrs = append(attrs,
		slog.String("protocol", c.inv.Protocol().String()),
		slog.String("kind", kind.String()))
	if perr != nil {
		attrs = append(attrs, slog.String("code", perr.Code))
	}
	if orig != nil {
		attrs = append(attrs, slog.String("original_kind", orig.Kind.String()), slog.String("original_code", orig.Code))
	}
	if s, ok := retryAfterSeconds(perr); ok {
		attrs = append(attrs, slog.Int64("retry_after_s", s))
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
