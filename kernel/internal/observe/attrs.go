package observe

import (
	"maps"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience"
)

// numProtocols is the number of pipeline.Protocol values.
const numProtocols = int(pipeline.ProtocolMCP) + 1

// protoSlot returns the index of p's precomputed attributes; a value past
// the known protocols is reported as "inprocess", as Protocol.String does.
func protoSlot(p pipeline.Protocol) int {
	if int(p) >= numProtocols {
		return int(pipeline.ProtocolInProcess)
	}
	return int(p)
}

// maxCodes bounds the distinct outcome codes (with their kinds) given their
// own metric attributes, per operation and protocol. Further codes are
// reported as otherCode, with their own kind. Codes are stable identifiers.
// So the bound is only a guard against an application that puts variable text
// in them.
const (
	maxCodes  = 64
	otherCode = "OTHER"
)

// Op is the telemetry of one operation, or of one host route: what can be
// computed once — span start options and, lazily, the attribute sets of
// each outcome — so that an observed call allocates no attribute slices.
// Get one from [Telemetry.Operation] or [Telemetry.Route]; a nil *Op
// observes nothing. It is safe for concurrent use.
type Op struct {
	t       *Telemetry
	name    string
	route   bool               // a host route (or an unknown operation ID)
	idAttr  attribute.KeyValue // span: sundial.operation.id or sundial.route
	idMAttr attribute.KeyValue // metrics: operation or route

	start [numProtocols][]trace.SpanStartOption
	// remaining: record options of MetricDeadlineRemaining per protocol.
	remaining [numProtocols][]metric.RecordOption
	// replays: add options of MetricIdempotencyReplays per protocol.
	replays [numProtocols][]metric.AddOption
	// rejected: add options of MetricRejectionCount per reason (see
	// reasons).
	rejected [len(reasons)][]metric.AddOption
	// observeShadow: observe options of MetricShadowRejectionCount per
	// reason (rate, concurrency, breaker).
	observeShadow [len(reasons)][]metric.ObserveOption
	// observe: observe options of the observable instruments.
	observe, observeRate, observeConc []metric.ObserveOption
	// observeBreaker: observe options of MetricBreakerState per state (see
	// breakerStates).
	observeBreaker [len(breakerStates)][]metric.ObserveOption

	mu       sync.Mutex // serialises writers of outcomes
	outcomes [numProtocols]atomic.Pointer[map[outcomeKey]*outcomeAttrs]
}

// outcomeKey identifies an outcome's attributes: a code may come with more
// than one kind (an application's code reused, or otherCode for every kind).
type outcomeKey struct {
	kind pipeline.Kind
	code string
}

// outcomeAttrs are the precomputed attributes of one outcome code.
type outcomeAttrs struct {
	span []attribute.KeyValue
	rec  []metric.RecordOption
}

var (
	protoAttrs  [numProtocols]attribute.KeyValue
	protoMAttrs [numProtocols]attribute.KeyValue
	spanKinds   = [numProtocols]trace.SpanKind{
		pipeline.ProtocolInProcess: trace.SpanKindInternal,
		pipeline.ProtocolHTTP:      trace.SpanKindServer,
		pipeline.ProtocolGRPC:      trace.SpanKindServer,
		pipeline.ProtocolCLI:       trace.SpanKindInternal,
		pipeline.ProtocolMCP:       trace.SpanKindServer,
	}
)

func init() {
	for i := range numProtocols {
		s := pipeline.Protocol(i).String()
		protoAttrs[i] = attribute.String(AttrProtocol, s)
		protoMAttrs[i] = attribute.String(MetricAttrProtocol, s)
	}
}

func newOp(t *Telemetry, name string, route bool) *Op {
	o := &Op{t: t, name: name, route: route}
	if route {
		o.idAttr = attribute.String(AttrRoute, name)
		o.idMAttr = attribute.String(MetricAttrRoute, name)
	} else {
		o.idAttr = attribute.String(AttrOperationID, name)
		o.idMAttr = attribute.String(MetricAttrOperation, name)
	}
	for i := range numProtocols {
		o.start[i] = []trace.SpanStartOption{
			trace.WithSpanKind(spanKinds[i]),
			trace.WithAttributes(o.idAttr, protoAttrs[i]),
		}
		set := attribute.NewSet(o.idMAttr, protoMAttrs[i])
		o.remaining[i] = []metric.RecordOption{metric.WithAttributeSet(set)}
		o.replays[i] = []metric.AddOption{metric.WithAttributeSet(set)}
	}
	for i, r := range reasons {
		set := attribute.NewSet(o.idMAttr, attribute.String(MetricAttrReason, r))
		o.rejected[i] = []metric.AddOption{metric.WithAttributeSet(set)}
		o.observeShadow[i] = []metric.ObserveOption{metric.WithAttributeSet(set)}
	}
	o.observe = []metric.ObserveOption{metric.WithAttributeSet(attribute.NewSet(o.idMAttr))}
	for i, st := range breakerStates {
		o.observeBreaker[i] = []metric.ObserveOption{metric.WithAttributeSet(attribute.NewSet(o.idMAttr, attribute.String(MetricAttrState, st)))}
	}
	o.observeRate = []metric.ObserveOption{metric.WithAttributeSet(attribute.NewSet(o.idMAttr, attribute.String(MetricAttrQueue, ReasonRate)))}
	o.observeConc = []metric.ObserveOption{metric.WithAttributeSet(attribute.NewSet(o.idMAttr, attribute.String(MetricAttrQueue, ReasonConcurrency)))}
	return o
}

// outcome returns the attributes of an outcome of kind k and code (""
// for OK) on protocol slot p, computing them on first use.
func (o *Op) outcome(p int, k pipeline.Kind, code string) *outcomeAttrs {
	key := outcomeKey{k, code}
	if m := o.outcomes[p].Load(); m != nil {
		if a, ok := (*m)[key]; ok {
			return a
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	old := o.outcomes[p].Load()
	var m map[outcomeKey]*outcomeAttrs
	if old != nil {
		if a, ok := (*old)[key]; ok {
			return a
		}
		if len(*old) >= maxCodes {
			key.code = otherCode
			if a, ok := (*old)[key]; ok {
				return a
			}
		}
		m = maps.Clone(*old)
	} else {
		m = make(map[outcomeKey]*outcomeAttrs, 2)
	}
	a := newOutcomeAttrs(o.idMAttr, protoMAttrs[p], k, key.code)
	m[key] = a
	o.outcomes[p].Store(&m)
	return a
}

func newOutcomeAttrs(id, proto attribute.KeyValue, k pipeline.Kind, code string) *outcomeAttrs {
	kind := k.String()
	a := &outcomeAttrs{}
	var set attribute.Set
	if code == "" {
		a.span = []attribute.KeyValue{attribute.String(AttrOutcomeKind, kind)}
		set = attribute.NewSet(id, proto, attribute.String(MetricAttrKind, kind))
	} else {
		a.span = []attribute.KeyValue{attribute.String(AttrOutcomeKind, kind), attribute.String(AttrOutcomeCode, code)}
		set = attribute.NewSet(id, proto, attribute.String(MetricAttrKind, kind), attribute.String(MetricAttrCode, code))
	}
	a.rec = []metric.RecordOption{metric.WithAttributeSet(set)}
	return a
}

// reasons are the rejection reasons, indexed as rejectionReason returns
// them.
var reasons = [...]string{ReasonRate, ReasonConcurrency, ReasonBreaker, ReasonOverloaded, ReasonShed}

// CodeOverloaded is the code of the kernel's overload answer
// (kernel.CodeOverloaded).
const CodeOverloaded = "KERNEL_UNAVAILABLE_005"

// rejectionReason returns the index in reasons of the limit named by a
// rejection's code, or -1 when code is not a rejection.
func rejectionReason(code string) int {
	switch code {
	case resilience.CodeRateLimited:
		return 0
	case resilience.CodeConcurrencyLimited:
		return 1
	case resilience.CodeCircuitOpen:
		return 2
	case CodeOverloaded:
		return 3
	case resilience.CodeShed:
		return 4
	}
	return -1
}

// priorityAttrs are the span attributes AttrPriority of each class, by
// class less PrioritySheddable.
var priorityAttrs = [...]attribute.KeyValue{
	attribute.String(AttrPriority, pipeline.PrioritySheddable.String()),
	attribute.String(AttrPriority, pipeline.PriorityDefault.String()),
	attribute.String(AttrPriority, pipeline.PriorityCritical.String()),
}

// priorityAttr returns the span attribute of class p.
func priorityAttr(p pipeline.Priority) attribute.KeyValue {
	return priorityAttrs[min(max(p, pipeline.PrioritySheddable), pipeline.PriorityCritical)-pipeline.PrioritySheddable]
}
