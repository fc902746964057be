package observe

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/sundial-go/sundial/resilience"
)

// Histogram bucket boundaries, in seconds. Durations start at 50 µs. So
// operations of a few hundred microseconds (an in-memory handler behind the
// pipeline) are resolved. They follow a 1-2.5-5 series up to the 10 s of
// OpenTelemetry's recommended HTTP boundaries. Deadline budgets reach
// further, up to the kernel's default MaxTimeout.
var (
	durationBuckets  = []float64{0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
	remainingBuckets = []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}
)

// instruments are the metric instruments of one Telemetry, made once.
type instruments struct {
	duration  metric.Float64Histogram
	httpDur   metric.Float64Histogram // MetricHTTPServerDuration
	rpcDur    metric.Float64Histogram // MetricRPCServerDuration
	rejected  metric.Int64Counter
	shadow    metric.Int64ObservableCounter // MetricShadowRejectionCount
	remaining metric.Float64Histogram

	breaker metric.Int64ObservableGauge
	queue   metric.Int64ObservableUpDownCounter
	active  metric.Int64ObservableUpDownCounter
	limit   metric.Int64ObservableGauge // MetricConcurrencyLimit
	adapt   metric.Int64ObservableGauge // MetricConcurrencyAdaptiveLimit
	late    metric.Int64ObservableUpDownCounter
	cluster metric.Int64ObservableGauge
	reloads metric.Int64Counter
	replays metric.Int64Counter

	outAttempts metric.Int64ObservableCounter // MetricOutboundAttempts
	outRefusals metric.Int64ObservableCounter // MetricOutboundBudgetRefusals
	outBreaker  metric.Int64ObservableGauge   // MetricOutboundBreakerState
	outThrottle metric.Int64ObservableCounter // MetricOutboundThrottled
	outProb     metric.Float64ObservableGauge // MetricOutboundThrottleProbability

	streamsOpen metric.Int64UpDownCounter // MetricStreamsOpen
	streamEnds  metric.Int64Counter       // MetricStreamEnds

	err error // instrument creation errors (the instruments are then no-ops)
}

func newInstruments(m metric.Meter, t *Telemetry) *instruments {
	in := &instruments{}
	var errs [24]error
	in.duration, errs[1] = m.Float64Histogram(MetricInvocationDuration,
		metric.WithDescription("Duration of finished invocations, by operation, protocol and attributed outcome."),
		metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(durationBuckets...))
	in.httpDur, errs[10] = m.Float64Histogram(MetricHTTPServerDuration,
		metric.WithDescription("Duration of HTTP server requests."),
		metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(durationBuckets...))
	in.rpcDur, errs[11] = m.Float64Histogram(MetricRPCServerDuration,
		metric.WithDescription("Measures the duration of an incoming Remote Procedure Call (RPC)."),
		metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(durationBuckets...))
	in.rejected, errs[2] = m.Int64Counter(MetricRejectionCount,
		metric.WithDescription("Invocations rejected by a per-operation limit, by operation and reason (rate, concurrency, breaker, overloaded, shed)."),
		metric.WithUnit("{invocation}"))
	in.remaining, errs[3] = m.Float64Histogram(MetricDeadlineRemaining,
		metric.WithDescription("Time remaining until the caller's deadline when the invocation arrived."),
		metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(remainingBuckets...))
	in.breaker, errs[4] = m.Int64ObservableGauge(MetricBreakerState,
		metric.WithDescription("Circuit breaker state per operation: 1 for the state it is in (closed, half_open or open), 0 for the others."),
		metric.WithUnit("{state}"))
	in.queue, errs[5] = m.Int64ObservableUpDownCounter(MetricQueueDepth,
		metric.WithDescription("Invocations waiting in an operation's rate-limit or concurrency queue."),
		metric.WithUnit("{invocation}"))
	in.active, errs[6] = m.Int64ObservableUpDownCounter(MetricConcurrencyActive,
		metric.WithDescription("Invocations holding a slot of an operation's concurrency limit."),
		metric.WithUnit("{invocation}"))
	in.limit, errs[17] = m.Int64ObservableGauge(MetricConcurrencyLimit,
		metric.WithDescription("The concurrency limit an operation enforces in this process: the static one, or the adaptive limit in force."),
		metric.WithUnit("{invocation}"))
	in.adapt, errs[18] = m.Int64ObservableGauge(MetricConcurrencyAdaptiveLimit,
		metric.WithDescription("The limit an operation's adaptive concurrency controller computed last: enforced, or in shadow mode the one it would apply."),
		metric.WithUnit("{invocation}"))
	in.late, errs[8] = m.Int64ObservableUpDownCounter(MetricStragglers,
		metric.WithDescription("Invocations still running after their answer left at the deadline (handlers that ignore their context)."),
		metric.WithUnit("{invocation}"))
	in.cluster, errs[9] = m.Int64ObservableGauge(MetricClusterDegraded,
		metric.WithDescription("1 while a cluster-scoped operation's store is unreachable and its OnStoreError fallback applies, else 0."),
		metric.WithUnit("{state}"))
	in.reloads, errs[12] = m.Int64Counter(MetricConfigReloads,
		metric.WithDescription("Configuration reloads, by result: ok (applied), invalid (refused, the last good configuration stays) or unchanged."),
		metric.WithUnit("{reload}"))
	in.replays, errs[13] = m.Int64Counter(MetricIdempotencyReplays,
		metric.WithDescription("Invocations answered with the stored outcome of an earlier call with the same idempotency key, by operation and protocol."),
		metric.WithUnit("{invocation}"))
	in.outAttempts, errs[14] = m.Int64ObservableCounter(MetricOutboundAttempts,
		metric.WithDescription("Attempts of outbound calls through a configured dependency, by dependency and attempt (first, retry, hedge)."),
		metric.WithUnit("{attempt}"))
	in.outRefusals, errs[15] = m.Int64ObservableCounter(MetricOutboundBudgetRefusals,
		metric.WithDescription("Retries and hedges refused by a dependency's retry budget, by dependency."),
		metric.WithUnit("{attempt}"))
	in.outBreaker, errs[16] = m.Int64ObservableGauge(MetricOutboundBreakerState,
		metric.WithDescription("A dependency's circuit breaker state: 1 for the state it is in (closed, half_open or open), 0 for the others."),
		metric.WithUnit("{state}"))
	in.shadow, errs[19] = m.Int64ObservableCounter(MetricShadowRejectionCount,
		metric.WithDescription("Invocations a limit in shadow mode would have rejected and let run, by operation and reason (rate, concurrency, breaker, shed)."),
		metric.WithUnit("{invocation}"))
	in.outThrottle, errs[20] = m.Int64ObservableCounter(MetricOutboundThrottled,
		metric.WithDescription("Calls and retries a dependency's adaptive throttle refused locally, by dependency."),
		metric.WithUnit("{attempt}"))
	in.outProb, errs[21] = m.Float64ObservableGauge(MetricOutboundThrottleProbability,
		metric.WithDescription("The probability that a dependency's adaptive throttle refuses a call now, by dependency."),
		metric.WithUnit("1"))
	in.streamsOpen, errs[22] = m.Int64UpDownCounter(MetricStreamsOpen,
		metric.WithDescription("Open streams of a streaming operation, by operation."),
		metric.WithUnit("{stream}"))
	in.streamEnds, errs[23] = m.Int64Counter(MetricStreamEnds,
		metric.WithDescription("Streams that ended, by operation and end reason."),
		metric.WithUnit("{stream}"))
	_, errs[7] = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		in.observe(t, o)
		in.observeDependencies(t, o)
		return nil
	}, in.breaker, in.queue, in.active, in.limit, in.adapt, in.late, in.cluster, in.shadow, in.outAttempts, in.outRefusals, in.outBreaker,
		in.outThrottle, in.outProb)
	in.err = errors.Join(errs[:]...)
	return in
}

// enabled reports whether the synchronous instruments record anything —
// false while the global meter provider is still otel's no-op default.
func (in *instruments) enabled(ctx context.Context) bool {
	return in != nil && in.duration.Enabled(ctx)
}

// observe reports every operation's limiter state.
func (in *instruments) observe(t *Telemetry, o metric.Observer) {
	if s := t.stragglers.Load(); s != nil {
		o.ObserveInt64(in.late, (*s)())
	}
	f := t.limits.Load()
	if f == nil {
		return
	}
	for _, op := range t.operations() {
		st, ok := (*f)(op.name)
		if !ok {
			continue
		}
		if st.HasBreaker {
			observeBreaker(o, in.breaker, st.Breaker, func(i int) []metric.ObserveOption { return op.observeBreaker[i] })
		}
		if st.RateLimited {
			o.ObserveInt64(in.queue, int64(st.RateQueueDepth), op.observeRate...)
		}
		if st.ConcurrencyLimited {
			o.ObserveInt64(in.queue, int64(st.ConcurrencyQueueDepth), op.observeConc...)
			o.ObserveInt64(in.active, int64(st.InFlight), op.observe...)
		}
		if st.ConcurrencyLimit > 0 {
			o.ObserveInt64(in.limit, int64(st.ConcurrencyLimit), op.observe...)
		}
		if st.AdaptiveLimit > 0 {
			o.ObserveInt64(in.adapt, int64(st.AdaptiveLimit), op.observe...)
		}
		if st.Shadow || st.Shadowed != (resilience.Rejections{}) {
			sh := st.Shadowed
			for i, n := range [...]int64{0: sh.Rate, 1: sh.Concurrency, 2: sh.Breaker, 4: sh.Shed} {
				if reasons[i] != ReasonOverloaded { // no shadow of the guard's
					o.ObserveInt64(in.shadow, n, op.observeShadow[i]...)
				}
			}
		}
		if st.Clustered {
			v := int64(0)
			if st.Degraded {
				v = 1
			}
			o.ObserveInt64(in.cluster, v, op.observe...)
		}
	}
}

// observeBreaker reports the breaker state s as one point per state of
// breakerStates, 1 for s and 0 for the others, with the options of each.
func observeBreaker(o metric.Observer, g metric.Int64ObservableGauge, s resilience.BreakerState, opts func(i int) []metric.ObserveOption) {
	cur := breakerSlot(s)
	for i := range breakerStates {
		v := int64(0)
		if i == cur {
			v = 1
		}
		o.ObserveInt64(g, v, opts(i)...)
	}
}

// breakerStates are the values of MetricAttrState, indexed as breakerSlot
// returns them.
var breakerStates = [...]string{BreakerClosed, BreakerHalfOpen, BreakerOpen}

// breakerSlot returns the index in breakerStates of s.
func breakerSlot(s resilience.BreakerState) int {
	switch s {
	case resilience.BreakerHalfOpen:
		return 1
	case resilience.BreakerOpen:
		return 2
	}
	return 0
}

// observeDependencies reports every configured dependency's stats.
func (in *instruments) observeDependencies(t *Telemetry, o metric.Observer) {
	f := t.deps.Load()
	if f == nil {
		return
	}
	for name, st := range (*f)() {
		dep := attribute.String(MetricAttrDependency, name)
		for _, a := range []struct {
			kind string
			n    int64
		}{{"first", st.Attempts - st.Retries - st.Hedges}, {"retry", st.Retries}, {"hedge", st.Hedges}} {
			o.ObserveInt64(in.outAttempts, a.n, metric.WithAttributes(dep, attribute.String(MetricAttrAttempt, a.kind)))
		}
		o.ObserveInt64(in.outRefusals, st.BudgetRefusals, metric.WithAttributes(dep))
		if st.HasBreaker {
			observeBreaker(o, in.outBreaker, st.Breaker, func(i int) []metric.ObserveOption {
				return []metric.ObserveOption{metric.WithAttributes(dep, attribute.String(MetricAttrState, breakerStates[i]))}
			})
		}
		if st.HasThrottle {
			o.ObserveInt64(in.outThrottle, st.Throttled, metric.WithAttributes(dep))
			o.ObserveFloat64(in.outProb, st.Rejection, metric.WithAttributes(dep))
		}
	}
}
