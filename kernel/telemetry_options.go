package kernel

import (
	"log/slog"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/sundial-go/sundial/kernel/telemetry"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience"
)

// telemetryOptions are the options of the built-in Diagnostics middleware.
type telemetryOptions struct {
	disabled bool
	tp       trace.TracerProvider
	mp       metric.MeterProvider
	access   *slog.Logger
	t        *telemetry.Telemetry // set by registerTelemetry
}

// WithTelemetry turns the built-in Diagnostics middleware (package
// kernel/telemetry: one span per invocation, the invocation metrics, the
// access log) on or off. It is on by default; with otel's no-op default
// providers it costs next to nothing, so turn it off only to replace it.
func WithTelemetry(enabled bool) Option {
	return optionFunc(func(o *options) { o.telemetry.disabled = !enabled })
}

// WithTracerProvider sets the tracer provider of the Diagnostics spans.
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

// WithAccessLog writes one line per finished invocation, with the
// attributed outcome, to l (see telemetry.WithAccessLog). The default (and
// a nil l) writes none; WithLogger's logger is not used for it.
func WithAccessLog(l *slog.Logger) Option {
	return optionFunc(func(o *options) { o.telemetry.access = l })
}

// registerTelemetry puts the telemetry Diagnostics middleware first among
// the built-ins, so it is the outermost middleware of every chain.
func registerTelemetry(o *options, k *Kernel) {
	if o.telemetry.disabled {
		return
	}
	t := telemetry.New(
		telemetry.WithTracerProvider(o.telemetry.tp),
		telemetry.WithMeterProvider(o.telemetry.mp),
		telemetry.WithAccessLog(o.telemetry.access),
	)
	o.telemetry.t = t
	if err := t.Err(); err != nil {
		k.logger.Warn("sundial: telemetry instruments", "error", err.Error())
	}
	b := BuiltIn(func(_ *Kernel, d *operations.Descriptor) pipeline.Middleware {
		if d == nil {
			return t.Middleware(nil)
		}
		return t.Middleware(d)
	})
	o.builtins = append([][2]any{{pipeline.StageDiagnostics, b}}, o.builtins...)
}

// observeLimits lets the telemetry's observable instruments read the
// limiters, once New has created all of them (collections may run on
// other goroutines, so they must not see the limiters map being built).
func observeLimits(o *options, k *Kernel) {
	if t := o.telemetry.t; t != nil {
		t.ObserveLimits(k.limitState)
	}
}

// limitState reports the limiter state of operation id.
func (k *Kernel) limitState(id string) (telemetry.LimitState, bool) {
	l := k.Limits(id)
	if l == nil {
		return telemetry.LimitState{}, false
	}
	p := l.Policy()
	st := telemetry.LimitState{
		Breaker:            telemetry.BreakerNone,
		RateLimited:        p.PermitLimit > 0,
		ConcurrencyLimited: p.ConcurrencyLimit > 0,
	}
	if p.FailureThreshold > 0 {
		switch l.BreakerState() {
		case resilience.BreakerOpen:
			st.Breaker = telemetry.BreakerOpen
		case resilience.BreakerHalfOpen:
			st.Breaker = telemetry.BreakerHalfOpen
		default:
			st.Breaker = telemetry.BreakerClosed
		}
	}
	if st.RateLimited {
		st.RateQueueDepth = l.RateQueueDepth()
	}
	if st.ConcurrencyLimited {
		st.ConcurrencyQueueDepth = l.ConcurrencyQueueDepth()
		st.InFlight = l.InFlight()
	}
	return st, true
}
