package observe

// ScopeName is the instrumentation scope of the tracer and meter the
// package uses. Its value is fixed: dashboards and docs/observability.md
// know it.
const ScopeName = "github.com/sundial-go/sundial/kernel/telemetry"

// Metric names. Units follow the OpenTelemetry conventions (seconds for
// durations, "{invocation}" for counts of calls); a Prometheus exporter
// renders them as, e.g., sundial_invocation_count_total and
// sundial_invocation_duration_seconds.
const (
	// MetricInvocationDuration is the duration of finished invocations in
	// seconds (Float64Histogram), by operation (or route), protocol, kind
	// and code. Its count is the number of finished invocations: there is
	// no separate counter (in Prometheus,
	// sundial_invocation_duration_seconds_count).
	MetricInvocationDuration = "sundial.invocation.duration"
	// MetricRejectionCount counts invocations rejected by a per-operation
	// limit (Int64Counter), by operation and reason.
	MetricRejectionCount = "sundial.rejection.count"
	// MetricShadowRejectionCount counts the invocations a limit in shadow
	// mode (the Shadow key) would have rejected and let run
	// (Int64ObservableCounter), by operation and reason: "rate",
	// "concurrency", "breaker" or "shed". Only operations in shadow mode, or that
	// were, are reported.
	MetricShadowRejectionCount = "sundial.rejection.shadow"
	// MetricDeadlineRemaining is the time that remained until the caller's
	// deadline when the invocation arrived, in seconds (Float64Histogram),
	// by operation (or route) and protocol. Calls without a deadline are not
	// recorded; a deadline already past records 0.
	MetricDeadlineRemaining = "sundial.deadline.remaining"
	// MetricBreakerState is the circuit breaker's state per operation
	// (Int64ObservableGauge), one point per state (MetricAttrState:
	// BreakerClosed, BreakerHalfOpen, BreakerOpen): 1 for the state the
	// breaker is in, 0 for the others. Operations without a breaker are not
	// reported.
	MetricBreakerState = "sundial.breaker.state"
	// MetricQueueDepth is the number of invocations waiting in an
	// operation's queue (Int64ObservableUpDownCounter), by operation and
	// queue ("rate" or "concurrency"). Only configured limits are reported.
	MetricQueueDepth = "sundial.queue.depth"
	// MetricConcurrencyActive is the number of invocations holding a slot
	// of an operation's concurrency limit (Int64ObservableUpDownCounter),
	// by operation. Only operations with a concurrency limit are reported.
	MetricConcurrencyActive = "sundial.concurrency.active"
	// MetricConcurrencyLimit is the concurrency limit an operation
	// enforces in this process (Int64ObservableGauge), by operation: the
	// static ConcurrencyLimit, or the adaptive limit in force. Operations
	// without one in this process are not reported.
	MetricConcurrencyLimit = "sundial.concurrency.limit"
	// MetricConcurrencyAdaptiveLimit is the limit an operation's adaptive
	// controller computed last (Int64ObservableGauge), by operation:
	// the one enforced, or with Adaptive.Shadow the one it would apply
	// (docs/resilience.md, "Adaptive concurrency"). Operations without a
	// controller are not reported.
	MetricConcurrencyAdaptiveLimit = "sundial.concurrency.adaptive_limit"
	// MetricStragglers is the number of invocations still running after
	// their answer left at the deadline — handlers that ignore their
	// context (Int64ObservableUpDownCounter). At the kernel's MaxStragglers
	// new calls are shed (reason "overloaded").
	MetricStragglers = "sundial.stragglers"
	// MetricClusterDegraded is 1 while a cluster-scoped operation's store
	// is unreachable and its OnStoreError fallback applies, else 0
	// (Int64ObservableGauge), by operation. Only cluster-scoped operations
	// are reported (docs/cluster.md).
	MetricClusterDegraded = "sundial.cluster.degraded"
	// MetricConfigReloads counts the kernel's configuration reloads
	// (Int64Counter), by result (MetricAttrResult): "ok" (applied),
	// "invalid" (refused; the last good configuration stays) or
	// "unchanged" (nothing to apply).
	MetricConfigReloads = "sundial.config.reloads"
	// MetricIdempotencyReplays counts the invocations answered with the stored
	// outcome of an earlier call with the same idempotency key, instead of
	// running (Int64Counter). It counts them by operation and protocol
	// (docs/idempotency.md). The other answers of the idempotency middleware are
	// outcome codes of MetricInvocationDuration. They are KERNEL_CONFLICT_001
	// (still running) and KERNEL_UNPROCESSABLE_001 (another input). They are
	// KERNEL_VALIDATION_004/_005 (key missing or malformed) and
	// KERNEL_UNAVAILABLE_006 (store unavailable).
	MetricIdempotencyReplays = "sundial.idempotency.replays"
	// MetricOutboundAttempts counts the attempts of outbound calls made
	// through a configured dependency (Int64ObservableCounter), by
	// dependency and attempt (MetricAttrAttempt: "first", "retry" or
	// "hedge"; docs/outbound.md).
	MetricOutboundAttempts = "sundial.outbound.attempts"
	// MetricOutboundBudgetRefusals counts the retries and hedges a
	// dependency's retry budget refused (Int64ObservableCounter), by
	// dependency.
	MetricOutboundBudgetRefusals = "sundial.outbound.budget_refusals"
	// MetricOutboundBreakerState is a dependency's breaker state
	// (Int64ObservableGauge), as MetricBreakerState is an operation's,
	// by dependency and state. Dependencies without a breaker are not
	// reported.
	MetricOutboundBreakerState = "sundial.outbound.breaker.state"
	// MetricOutboundThrottled counts the calls and retries a dependency's
	// adaptive throttle refused locally (Int64ObservableCounter), by
	// dependency. Dependencies without a throttle are not reported.
	MetricOutboundThrottled = "sundial.outbound.throttle.rejections"
	// MetricOutboundThrottleProbability is the probability that a
	// dependency's throttle refuses a call now (Float64ObservableGauge), by
	// dependency. Dependencies without a throttle are not reported.
	MetricOutboundThrottleProbability = "sundial.outbound.throttle.probability"
	// MetricStreamsOpen is the number of open streams of a streaming
	// operation (Int64UpDownCounter), by operation.
	MetricStreamsOpen = "sundial.stream.open"
	// MetricStreamEnds counts the streams that ended (Int64Counter), by
	// operation and end reason (MetricAttrEndReason).
	MetricStreamEnds = "sundial.stream.ends"
)

// Metric attribute keys. They are short because the metric names are
// already namespaced; on spans, the namespaced keys below are used.
const (
	// MetricAttrOperation is the operation ID.
	MetricAttrOperation = "operation"
	// MetricAttrRoute is the route of a host endpoint (instead of
	// operation).
	MetricAttrRoute = "route"
	// MetricAttrProtocol is "http", "grpc", "cli" or "inprocess".
	MetricAttrProtocol = "protocol"
	// MetricAttrKind is the attributed outcome's kind, e.g. "OK",
	// "TIMEOUT".
	MetricAttrKind = "kind"
	// MetricAttrCode is the attributed outcome's stable code, e.g.
	// "KERNEL_TIMEOUT_001"; absent for OK.
	MetricAttrCode = "code"
	// MetricAttrReason is the limit that rejected a call: "rate",
	// "concurrency", "breaker", "overloaded" or "shed".
	MetricAttrReason = "reason"
	// MetricAttrState is the breaker state of a MetricBreakerState point:
	// BreakerClosed, BreakerHalfOpen or BreakerOpen.
	MetricAttrState = "state"
	// MetricAttrQueue is the queue of MetricQueueDepth: "rate" or
	// "concurrency".
	MetricAttrQueue = "queue"
	// MetricAttrResult is the result of a MetricConfigReloads point: "ok",
	// "invalid" or "unchanged".
	MetricAttrResult = "result"
	// MetricAttrDependency is the dependency's configured name.
	MetricAttrDependency = "dependency"
	// MetricAttrAttempt is the attempt of a MetricOutboundAttempts point:
	// "first", "retry" or "hedge".
	MetricAttrAttempt = "attempt"
	// MetricAttrEndReason is a MetricStreamEnds point's end reason, as
	// AttrStreamEndReason names it.
	MetricAttrEndReason = "end_reason"
)

// Span attribute keys.
const (
	// AttrOperationID is the operation ID; absent for host endpoints.
	AttrOperationID = "sundial.operation.id"
	// AttrRoute is the route of a host endpoint, e.g. "GET /healthz".
	AttrRoute = "sundial.route"
	// AttrProtocol is the entry point: "http", "grpc", "cli" or
	// "inprocess".
	AttrProtocol = "sundial.protocol"
	// AttrOutcomeKind is the attributed outcome's kind (what the caller was
	// told).
	AttrOutcomeKind = "sundial.outcome.kind"
	// AttrOutcomeCode is the attributed outcome's code; absent for OK.
	AttrOutcomeCode = "sundial.outcome.code"
	// AttrOriginalKind and AttrOriginalCode are the outcome as the handler
	// (and the breaker) saw it, present only when it differs from the
	// attributed one — e.g. CANCELLED under a TIMEOUT.
	AttrOriginalKind = "sundial.outcome.original_kind"
	AttrOriginalCode = "sundial.outcome.original_code"
	// AttrDeadline is the invocation's effective deadline (RFC 3339, UTC),
	// after the operation's and the kernel's caps; absent when it had none.
	AttrDeadline = "sundial.deadline"
	// AttrDeadlineBudgetMs is the time that remained until the caller's
	// deadline when the call arrived, in milliseconds (before caps);
	// absent when the caller sent no deadline.
	AttrDeadlineBudgetMs = "sundial.deadline.budget_ms"
	// AttrIdempotencyKey reports whether the caller sent an idempotency
	// key (baggage sundial.idempotency-key); the key itself is not
	// recorded.
	AttrIdempotencyKey = "sundial.idempotency_key.present"
	// AttrIdempotencyReplayed is true on an invocation whose outcome was
	// replayed from the idempotency store (the handler did not run);
	// absent otherwise.
	AttrIdempotencyReplayed = "sundial.idempotency.replayed"
	// AttrPriority is the invocation's effective class: "critical",
	// "default" or "sheddable" (its operation's, as the caller may have
	// lowered it); absent for host endpoints.
	AttrPriority = "sundial.priority"
	// AttrStreamEndReason is why a stream ended: "completed", "deadline",
	// "idle", "slow_consumer", "caller_left", "drained", "limit" or
	// "transport"; absent on a call that opened no stream.
	AttrStreamEndReason = "sundial.stream.end_reason"
	// AttrStreamSent and AttrStreamReceived count a stream's messages
	// sent to the caller and received from it.
	AttrStreamSent     = "sundial.stream.messages_sent"
	AttrStreamReceived = "sundial.stream.messages_received"
)

// Span events and their attribute keys.
const (
	// EventRejection is added when a per-operation limit rejected the
	// call.
	EventRejection = "sundial.rejection"
	// AttrRejectionLimit is the limit that rejected: "rate",
	// "concurrency", "breaker", "overloaded" or "shed".
	AttrRejectionLimit = "sundial.rejection.limit"
	// AttrRetryAfter is the rejection's retry hint (its retry-after) in
	// whole seconds, rounded up; absent when the limit gives none.
	AttrRetryAfter = "sundial.rejection.retry_after_s"
	// EventDeadlineExceeded is added, with the deadline's instant as its
	// timestamp, when the invocation's deadline fired.
	EventDeadlineExceeded = "sundial.deadline.exceeded"
	// AttrDeadlineOnArrival is true on EventDeadlineExceeded when the
	// deadline had already passed when the call arrived (nothing ran).
	AttrDeadlineOnArrival = "sundial.deadline.on_arrival"
)

// Rejection reasons (MetricAttrReason, AttrRejectionLimit).
const (
	ReasonRate        = "rate"
	ReasonConcurrency = "concurrency"
	ReasonBreaker     = "breaker"
	// ReasonOverloaded: the kernel shed the call while MaxStragglers
	// invocations still ran after their answer (KERNEL_UNAVAILABLE_005).
	ReasonOverloaded = "overloaded"
	// ReasonShed: a full concurrency limit shed the call for its class
	// (KERNEL_UNAVAILABLE_008).
	ReasonShed = "shed"
)

// Breaker states (MetricAttrState).
const (
	BreakerClosed   = "closed"
	BreakerHalfOpen = "half_open"
	BreakerOpen     = "open"
)
