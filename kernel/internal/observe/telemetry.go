package observe

import (
	"context"
	"log/slog"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience"
	"github.com/sundial-go/sundial/resilience/outbound"
)

// Option configures a Telemetry.
type Option interface{ apply(*Telemetry) }

type optionFunc func(*Telemetry)

func (f optionFunc) apply(t *Telemetry) { f(t) }

// WithTracerProvider sets the tracer provider. The default (and a nil tp)
// is the global one, read on every call, so a provider installed with
// otel.SetTracerProvider after New is used from then on. A no-op provider
// (go.opentelemetry.io/otel/trace/noop, or the global default before any
// SDK is installed) turns tracing off at no cost.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(t *Telemetry) { t.tp = tp })
}

// WithMeterProvider sets the meter provider. The default (and a nil mp) is
// the global one; instruments made from it start recording once an SDK is
// installed with otel.SetMeterProvider. With a no-op provider the
// instruments are disabled and nothing is recorded.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(t *Telemetry) { t.mp = mp })
}

// WithAccessLog writes one line per finished invocation to l, at level Info
// (Error for UNEXPECTED outcomes). The line holds the operation or route, the
// protocol, and the attributed kind and code. It holds the original kind and
// code when they differ, and the duration. It holds the trace and span IDs
// when a span was recorded. The default (and a nil l) writes nothing.
func WithAccessLog(l *slog.Logger) Option {
	return optionFunc(func(t *Telemetry) { t.access = l })
}

// ObserveLimits sets the function the observable instruments call, at
// each collection, to read the state of every operation's limiters. Until
// it is called (and after it is called with nil) the breaker state, queue
// depth and concurrency instruments report nothing. The kernel calls it
// once every operation's limiters exist. On a nil Telemetry it does
// nothing.
func (t *Telemetry) ObserveLimits(f LimitsFunc) {
	if t == nil {
		return
	}
	if f == nil {
		t.limits.Store(nil)
		return
	}
	t.limits.Store(&f)
}

// ObserveStragglers sets the function the stragglers instrument
// (MetricStragglers) calls at each collection. Until it is called the
// instrument reports nothing. On a nil Telemetry it does nothing.
func (t *Telemetry) ObserveStragglers(f func() int64) {
	if t == nil || f == nil {
		return
	}
	t.stragglers.Store(&f)
}

// ObserveDependencies sets the function the outbound instruments
// (MetricOutboundAttempts, MetricOutboundBudgetRefusals,
// MetricOutboundBreakerState) call at each collection to read every
// configured dependency's stats. Until it is called they report nothing.
// On a nil Telemetry it does nothing.
func (t *Telemetry) ObserveDependencies(f func() map[string]outbound.Stats) {
	if t == nil || f == nil {
		return
	}
	t.deps.Store(&f)
}

// LimitState is a snapshot of one operation's limiters, as the observable
// instruments report it.
type LimitState struct {
	// HasBreaker reports whether the operation has a circuit breaker;
	// Breaker is its state.
	HasBreaker bool
	Breaker    resilience.BreakerState
	// RateLimited reports whether a rate limit is configured;
	// RateQueueDepth is the number of calls waiting for the next window.
	RateLimited    bool
	RateQueueDepth int
	// ConcurrencyLimited reports whether a concurrency limit is
	// configured; ConcurrencyQueueDepth is the number of calls waiting for
	// a slot and InFlight the number holding one.
	ConcurrencyLimited    bool
	ConcurrencyQueueDepth int
	InFlight              int
	// ConcurrencyLimit is the concurrency limit enforced in this process (0:
	// none, or counted in the store). AdaptiveLimit is the adaptive controller's
	// (0: none). It is the one enforced or, in shadow mode, the one it would
	// apply.
	ConcurrencyLimit, AdaptiveLimit int
	// Clustered reports limits counted across replicas (Scope cluster);
	// Degraded that the store is unreachable and OnStoreError applies.
	Clustered bool
	Degraded  bool
	// Shadow reports limits in shadow mode; Shadowed counts the calls
	// they would have rejected.
	Shadow   bool
	Shadowed resilience.Rejections
}

// LimitsFunc returns the limiter state of the operation id, or false when
// the operation has no limiters. It is called from metric collection and
// must be safe for concurrent use.
type LimitsFunc func(id string) (LimitState, bool)

// Telemetry holds the tracer, the instruments and the access log shared by
// every operation of one kernel. Create it with New; it is safe for
// concurrent use.
type Telemetry struct {
	tp     trace.TracerProvider // nil: the global provider, read per call
	mp     metric.MeterProvider
	access *slog.Logger
	limits atomic.Pointer[LimitsFunc]
	// stragglers reads the kernel's count of stragglers (ObserveStragglers).
	stragglers atomic.Pointer[func() int64]
	// deps reads the dependencies' stats (ObserveDependencies).
	deps atomic.Pointer[func() map[string]outbound.Stats]

	fixed   *tracerState                // the resolved tp, when tp is not nil
	current atomic.Pointer[tracerState] // the last global provider seen

	inst *instruments // nil when the meter provider is a no-op

	semconv semconvSets // record options of the conventions' duration metrics

	mu     sync.Mutex // guards ops and routes' writers
	ops    []*Op
	routes atomic.Pointer[map[string]*Op]
}

// New returns a Telemetry configured by opts. It creates the instruments
// (once; never per call) and registers the callback of the observable
// ones.
func New(opts ...Option) *Telemetry {
	t := &Telemetry{}
	for _, o := range opts {
		if o != nil {
			o.apply(t)
		}
	}
	if t.tp != nil && isGlobalDefault(t.tp) {
		// The global default delegates to whatever is installed later: keep
		// reading the global provider instead of freezing it as a no-op.
		t.tp = nil
	}
	if t.tp != nil {
		t.fixed = resolveTracer(t.tp)
	}
	mp := t.mp
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	if _, ok := mp.(metricnoop.MeterProvider); !ok {
		t.inst = newInstruments(mp.Meter(ScopeName), t)
	}
	return t
}

// tracerState is a resolved tracer provider.
type tracerState struct {
	tp         trace.TracerProvider
	comparable bool
	tracer     trace.Tracer // nil: the provider is a no-op
}

func resolveTracer(tp trace.TracerProvider) *tracerState {
	s := &tracerState{tp: tp, comparable: reflect.TypeOf(tp).Comparable()}
	if !isNoopTracerProvider(tp) {
		s.tracer = tp.Tracer(ScopeName)
	}
	return s
}

// tracer returns the tracer to use for one call, or nil when tracing is
// off. For the global provider it costs one atomic load and a comparison.
func (t *Telemetry) tracer() trace.Tracer {
	if t.fixed != nil {
		return t.fixed.tracer
	}
	tp := otel.GetTracerProvider()
	// Comparing interfaces panics only when both hold the same
	// non-comparable type; s.comparable rules that out.
	if s := t.current.Load(); s != nil && s.comparable && s.tp == tp {
		return s.tracer
	}
	s := resolveTracer(tp)
	t.current.Store(s)
	return s.tracer
}

func isNoopTracerProvider(tp trace.TracerProvider) bool {
	switch tp.(type) {
	case tracenoop.TracerProvider, *tracenoop.TracerProvider:
		return true
	}
	return isGlobalDefault(tp)
}

// globalPkg is the package of otel's default global providers. Until an
// SDK is installed, otel.GetTracerProvider returns a value of its type,
// and every span it starts is a no-op; once one is installed,
// GetTracerProvider returns the installed provider instead.
const globalPkg = "go.opentelemetry.io/otel/internal/global"

func isGlobalDefault(v any) bool {
	rt := reflect.TypeOf(v)
	if rt != nil && rt.Kind() == reflect.Pointer {
		rt = rt.Elem()
	}
	return rt != nil && rt.PkgPath() == globalPkg
}

// Operation returns the telemetry of op, whose spans and metrics are named
// by its operation ID. Call it once per operation (the kernel does, when
// it is made) and keep the result: the observable instruments report the
// limiters of every operation it was called for. It returns nil when t or
// op is nil.
func (t *Telemetry) Operation(op pipeline.Operation) *Op {
	if t == nil || op == nil {
		return nil
	}
	o := newOp(t, op.OperationID(), false)
	t.mu.Lock()
	t.ops = append(t.ops, o)
	t.mu.Unlock()
	return o
}

// maxRoutes bounds the distinct host routes given their own metric
// attributes; further routes share the route name "other".
const maxRoutes = 256

// Route returns the telemetry of a host endpoint, or of a call to an unknown
// operation ID. Its spans and metrics are named by name: a route such as "GET
// /healthz", or the ID. Results are cached by name. Past 256 distinct names,
// further ones share the metric attributes of the name "other". Spans keep
// the invocation's own name. Route returns nil when t is nil.
func (t *Telemetry) Route(name string) *Op {
	if t == nil {
		return nil
	}
	if m := t.routes.Load(); m != nil {
		if o, ok := (*m)[name]; ok {
			return o
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	old := t.routes.Load()
	if old != nil {
		if o, ok := (*old)[name]; ok {
			return o
		}
	}
	var m map[string]*Op
	if old != nil {
		if len(*old) >= maxRoutes {
			if o, ok := (*old)["other"]; ok {
				return o
			}
			name = "other"
		}
		m = make(map[string]*Op, len(*old)+1)
		for k, v := range *old {
			m[k] = v
		}
	} else {
		m = make(map[string]*Op, 1)
	}
	o := newOp(t, name, true)
	m[name] = o
	t.routes.Store(&m)
	return o
}

// operations returns the operations registered so far.
func (t *Telemetry) operations() []*Op {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clip(t.ops)
}

// Err reports errors the meter returned while New created the instruments
// (an instrument that failed is a no-op). It is nil when all went well.
func (t *Telemetry) Err() error {
	if t == nil || t.inst == nil {
		return nil
	}
	return t.inst.err
}

// ConfigReloaded counts one configuration reload with its result ("ok",
// "invalid" or "unchanged"; MetricConfigReloads). On a nil Telemetry, or
// with metrics off, it does nothing.
func (t *Telemetry) ConfigReloaded(result string) {
	if t == nil || t.inst == nil {
		return
	}
	t.inst.reloads.Add(context.Background(), 1, metric.WithAttributes(attribute.String(MetricAttrResult, result)))
}
