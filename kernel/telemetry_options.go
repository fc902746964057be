package kernel

import (
	"log/slog"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/sundial-go/sundial/kernel/internal/observe"
	"github.com/sundial-go/sundial/resilience"
	"github.com/sundial-go/sundial/resilience/outbound"
)

// telemetryOptions are the options of the kernel's telemetry, which
// observes every invocation at the kernel's edge.
type telemetryOptions struct {
	disabled bool
	tp       trace.TracerProvider
	mp       metric.MeterProvider
	access   *slog.Logger
	t        *observe.Telemetry // set by newTelemetry
}

// WithTelemetry turns the kernel's telemetry on or off. That is one span per
// invocation, the invocation metrics and the access log
// (kernel/internal/observe). They cover every answer, early rejections and
// answers at the deadline included. Telemetry is on by default. With otel's
// no-op default providers it costs next to nothing, so turn it off only to
// replace it.
func WithTelemetry(enabled bool) Option {
	return optionFunc(func(o *options) { o.telemetry.disabled = !enabled })
}

// WithTracerProvider sets the tracer provider of the invocations' spans.
// The default (and a nil tp) is otel's global provider, read on every
// call, so one installed with otel.SetTracerProvider after New is used.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(o *options) { o.telemetry.tp = tp })
}

// WithMeterProvider sets the meter provider of the Sundial metrics. The
// default (and a nil mp) is otel's global provider.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(o *options) { o.telemetry.mp = mp })
}

// MeterProvider returns the meter provider of the Sundial metrics:
// WithMeterProvider's, or otel's global provider. Adapters record their
// own metrics with it.
func (k *Kernel) MeterProvider() metric.MeterProvider {
	if mp := k.opts.telemetry.mp; mp != nil {
		return mp
	}
	return otel.GetMeterProvider()
}

// WithAccessLog writes one line per finished invocation, with the
// attributed outcome, to l, at level Info (Error for UNEXPECTED
// outcomes). The default (and a nil l) writes none; WithLogger's logger
// is not used for it.
func WithAccessLog(l *slog.Logger) Option {
	return optionFunc(func(o *options) { o.telemetry.access = l })
}

// newTelemetry creates the kernel's telemetry, or nil when it is off.
func newTelemetry(o *options, k *Kernel) *observe.Telemetry {
	if o.telemetry.disabled {
		return nil
	}
	t := observe.New(
		observe.WithTracerProvider(o.telemetry.tp),
		observe.WithMeterProvider(o.telemetry.mp),
		observe.WithAccessLog(o.telemetry.access),
	)
	o.telemetry.t = t
	if err := t.Err(); err != nil {
		k.logger.Warn("sundial: telemetry instruments", "error", err.Error())
	}
	return t
}

// observeLimits reports the state of every operation's limits to the
// telemetry's observable instruments.
func observeLimits(o *options, k *Kernel) {
	if t := o.telemetry.t; t != nil {
		t.ObserveLimits(k.limitState)
		t.ObserveStragglers(k.stragglers.Load)
		t.ObserveDependencies(k.dependencyStats)
	}
}

// dependencyStats returns every configured dependency's stats.
func (k *Kernel) dependencyStats() map[string]outbound.Stats {
	m := k.deps.Load()
	if m == nil {
		return nil
	}
	out := make(map[string]outbound.Stats, len(*m))
	for name, d := range *m {
		out[name] = d.Stats()
	}
	return out
}

func (k *Kernel) limitState(id string) (observe.LimitState, bool) {
	l := k.limitsOf(id)
	if l == nil {
		return observe.LimitState{}, false
	}
	p := l.Policy()
	st := observe.LimitState{
		HasBreaker:         p.FailureThreshold > 0,
		RateLimited:        p.PermitLimit > 0,
		ConcurrencyLimited: p.ConcurrencyLimit != 0 || p.Adaptive.Shadow,
	}
	ls := l.State()
	st.Shadow, st.Shadowed = p.Shadow, ls.Shadowed
	if st.HasBreaker {
		st.Breaker = ls.Breaker
	}
	if st.RateLimited {
		st.RateQueueDepth = ls.RateQueue
	}
	if st.ConcurrencyLimited {
		st.ConcurrencyQueueDepth, st.InFlight = ls.ConcurrencyQueue, ls.InFlight
		st.ConcurrencyLimit, st.AdaptiveLimit = ls.ConcurrencyLimit, ls.AdaptiveLimit
	}
	if cs := k.store.Load(); p.Scope == resilience.ScopeCluster && cs != nil {
		st.Clustered = true
		st.Degraded = cs.Degraded(id)
	}
	return st, true
}
