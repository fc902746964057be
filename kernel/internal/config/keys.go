// Package config holds the table of the keys of the section
// Sundial.Kernel.Resilience and everything derived from it: parsing and
// validation, the merge of the section's defaults with an operation's
// overrides, the reload diff, the names environment variables map to, and
// the table of docs/policy-keys.md. Adding a key is one row of Keys.
package config

import (
	"fmt"
	"strings"
	"time"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience"
	"github.com/sundial-go/sundial/resilience/idempotency"
)

// Target is what the keys of one operation resolve to.
type Target struct {
	Policy      resilience.Policy
	Idempotency idempotency.Policy
	Custom      Custom
	Stream      Stream
}

// Stream is the configuration of a streaming operation's streams.
type Stream struct {
	// MaxStreams bounds the streams open at once; 0: unbounded.
	MaxStreams int
	// Idle and SendStall are the stream's idle and send-stall clocks.
	Idle, SendStall Duration
	// MessagesPerSecond bounds the caller's messages; HardRate ends the
	// stream instead of pacing Recv.
	MessagesPerSecond float64
	HardRate          bool
	// MaxMessages and MaxBytes bound what the caller sends.
	MaxMessages, MaxBytes int
	// Heartbeat is the period of the transport's heartbeats.
	Heartbeat Duration
	// MaxAge ends a stream after it, less a random part of up to
	// MaxAgeJitter of it.
	MaxAge       Duration
	MaxAgeJitter float64
}

// DefaultSendStall is Stream.SendStallSeconds' default: a consumer that
// reads nothing for it holds no stream, whatever the server's timeouts.
const DefaultSendStall = 30 * time.Second

// DefaultMaxAgeJitter is Stream.MaxAgeJitter's default.
const DefaultMaxAgeJitter = 0.1

// Custom is the configuration of the operation's limits of its own kinds
// (kernel.WithLimitKind).
type Custom struct {
	// Limits is the Limits object as canonical JSON (keys sorted; "" when
	// not set): limit kind -> its configuration object.
	Limits string
}

// MaxCustomLimits bounds the limits of one operation's Limits object.
const MaxCustomLimits = 4

// Key is one row of the table: a key of the section, with what the docs
// say of it and how it is parsed and applied.
type Key struct {
	// Name is the key as written in JSON. A key inside an object of the
	// section is named Object.Key (Idempotency.Enabled).
	Name string
	// Type, Default and Bounds are the JSON type, the default and the
	// accepted values, as the docs state them.
	Type, Default, Bounds string
	// Reloadable keys are applied by a reload. The others are read at
	// start-up only: a reload that changes one logs that it is ignored.
	// The kernel keeps their start-up value in force: today those are the
	// Idempotency keys, which it compiles into the chain at New.
	Reloadable bool
	// Inherited keys are taken from the section's root, key by key, by an
	// operation that does not set them. A key of an object that is not
	// inherited comes with its object: an operation's object replaces the
	// root's whole, and its unset keys take their built-in default.
	Inherited bool
	// Doc is one sentence saying what the key is for.
	Doc string
	// value parses the key and applies it to a Target.
	value value
}

// object returns the object the key belongs to ("" at the section's root).
func (k Key) object() string {
	obj, _, ok := strings.Cut(k.Name, ".")
	if !ok {
		return ""
	}
	return obj
}

// leaf returns the key's name inside its object.
func (k Key) leaf() string {
	_, leaf, ok := strings.Cut(k.Name, ".")
	if !ok {
		return k.Name
	}
	return leaf
}

// OperationsKey is the section's key of per-operation overrides.
const OperationsKey = "Operations"

const positiveInt = "1 to 2147483647"

const seconds = "> 0, at most 1e9"

// The defaults the table states of keys whose default the store or the
// middleware applies (cluster's 50 ms store timeout and 3 failures to
// degrade, idempotency's 24 h retention and 64 KiB outcomes) are written
// out: the docs state them, and TestStatedDefaults checks them against
// what the packages apply.

// Keys is the table of the section's keys, in the order error messages
// and the docs list them.
var Keys = []Key{
	{Name: "PermitLimit", Type: "integer", Default: "unlimited", Bounds: positiveInt, Reloadable: true, Inherited: true,
		Doc:   "Calls admitted per window.",
		value: use(integer(1), func(t *Target) *int { return &t.Policy.PermitLimit })},
	{Name: "WindowSeconds", Type: "number", Default: "1", Bounds: seconds, Reloadable: true, Inherited: true,
		Doc:   "Length of the rate limit's fixed window, in seconds.",
		value: withDefault(duration, func(t *Target) *Duration { return &t.Policy.Window }, resilience.DefaultWindow)},
	{Name: "QueueLimit", Type: "integer", Default: "0", Bounds: "0 to 2147483647", Reloadable: true, Inherited: true,
		Doc:   "Calls that may wait for the next window when this one is used up.",
		value: use(integer(0), func(t *Target) *int { return &t.Policy.QueueLimit })},
	{Name: "ConcurrencyLimit", Type: `integer or "adaptive"`, Default: "unlimited", Bounds: positiveInt + `, or "adaptive"`, Reloadable: true, Inherited: true,
		Doc:   `Calls executing at once; "adaptive": the limit the Adaptive controller finds (docs/resilience.md).`,
		value: use(concurrencyLimit, func(t *Target) *int { return &t.Policy.ConcurrencyLimit })},
	{Name: "ConcurrencyQueueLimit", Type: "integer", Default: "0", Bounds: "0 to 2147483647", Reloadable: true, Inherited: true,
		Doc:   "Calls that may wait for a free slot.",
		value: use(integer(0), func(t *Target) *int { return &t.Policy.ConcurrencyQueueLimit })},
	{Name: "Adaptive.MinLimit", Type: "integer", Default: "1", Bounds: positiveInt, Reloadable: true,
		Doc:   "Lowest limit of an adaptive concurrency limit.",
		value: use(integer(1), func(t *Target) *int { return &t.Policy.Adaptive.MinLimit })},
	{Name: "Adaptive.MaxLimit", Type: "integer", Default: "1000, or MinLimit when above", Bounds: positiveInt + ", at least MinLimit", Reloadable: true,
		Doc:   "Highest limit of an adaptive concurrency limit.",
		value: use(integer(1), func(t *Target) *int { return &t.Policy.Adaptive.MaxLimit })},
	{Name: "Adaptive.InitialLimit", Type: "integer", Default: "20", Bounds: positiveInt + " (clamped to MinLimit..MaxLimit)", Reloadable: true,
		Doc:   "Where an adaptive limit starts; a reload keeps the limit learned.",
		value: use(integer(1), func(t *Target) *int { return &t.Policy.Adaptive.InitialLimit })},
	{Name: "Adaptive.WindowSeconds", Type: "number", Default: "1", Bounds: seconds, Reloadable: true,
		Doc:   "Shortest time the controller measures before it moves the limit (it also waits for 10 calls to end), in seconds.",
		value: use(duration, func(t *Target) *Duration { return &t.Policy.Adaptive.Window })},
	{Name: "Adaptive.HealthyLatencyMs", Type: "number", Default: "none", Bounds: "0.001 to 60000", Reloadable: true,
		Doc:   "Healthy-latency ceiling: while the mean latency is above it, the limit never grows, in milliseconds.",
		value: use(milliseconds, func(t *Target) *Duration { return &t.Policy.Adaptive.HealthyLatency })},
	{Name: "Adaptive.Shadow", Type: "boolean", Default: "false", Bounds: `true or false; not with "ConcurrencyLimit": "adaptive"`, Reloadable: true,
		Doc:   "Runs the controller beside the static ConcurrencyLimit, which stays enforced, and reports the limit it would apply.",
		value: use(boolean, func(t *Target) *bool { return &t.Policy.Adaptive.Shadow })},
	{Name: "Priority", Type: "string", Default: `"default"`, Bounds: `"critical", "default" or "sheddable"`, Reloadable: true, Inherited: true,
		Doc:   "The operation's class: a full concurrency limit sheds calls below it, and sheddable ones, first; a caller may lower it per call, never raise it.",
		value: use(priority, func(t *Target) *pipeline.Priority { return &t.Policy.Priority })},
	{Name: "PriorityReserve", Type: "number", Default: "0.2", Bounds: "0 to 0.999", Reloadable: true, Inherited: true,
		Doc:   "Fraction of ConcurrencyLimit, rounded down to whole slots, that calls a caller lowered below Priority may not take.",
		value: withDefault(fraction, func(t *Target) *float64 { return &t.Policy.PriorityReserve }, resilience.DefaultPriorityReserve)},
	{Name: "FailureThreshold", Type: "integer", Default: "none (no breaker)", Bounds: positiveInt, Reloadable: true, Inherited: true,
		Doc:   "Consecutive failures that open the circuit breaker.",
		value: use(integer(1), func(t *Target) *int { return &t.Policy.FailureThreshold })},
	{Name: "BreakSeconds", Type: "number", Default: "30", Bounds: seconds, Reloadable: true, Inherited: true,
		Doc:   "How long the open breaker rejects calls, in seconds.",
		value: withDefault(duration, func(t *Target) *Duration { return &t.Policy.BreakDuration }, resilience.DefaultBreakDuration)},
	{Name: "TimeoutSeconds", Type: "number", Default: "none", Bounds: seconds, Reloadable: true, Inherited: true,
		Doc:   "Deadline of a call that brings none, and cap of one that does, in seconds.",
		value: use(duration, func(t *Target) *Duration { return &t.Policy.Timeout })},
	{Name: "Scope", Type: "string", Default: `"process"`, Bounds: `"process" or "cluster"`, Reloadable: true, Inherited: true,
		Doc:   "Where the rate and concurrency limits are counted: this process, or every replica (docs/cluster.md).",
		value: use(scope, func(t *Target) *resilience.Scope { return &t.Policy.Scope })},
	{Name: "StoreTimeoutMs", Type: "number", Default: "50", Bounds: "0.001 to 60000", Reloadable: true, Inherited: true,
		Doc:   "Bound of each call to the shared store of a cluster-scoped limit, in milliseconds.",
		value: use(milliseconds, func(t *Target) *Duration { return &t.Policy.StoreTimeout })},
	{Name: "DegradeAfter", Type: "integer", Default: "3", Bounds: fmt.Sprintf("1 to %d", maxDegradeAfter), Reloadable: true, Inherited: true,
		Doc:   "Store calls in a row that must fail before a cluster-scoped limit does what OnStoreError says.",
		value: use(bounded(1, maxDegradeAfter), func(t *Target) *int { return &t.Policy.DegradeAfter })},
	{Name: "OnStoreError", Type: "string", Default: `"local"`, Bounds: `"local", "open" or "closed"`, Reloadable: true, Inherited: true,
		Doc:   "What a cluster-scoped limit does while its store fails: enforce this replica's share, admit, or reject.",
		value: use(onStoreError, func(t *Target) *string { return &t.Policy.OnStoreError })},
	{Name: "ExpectedReplicas", Type: "integer", Default: "the live count", Bounds: positiveInt, Reloadable: true, Inherited: true,
		Doc:   `Replica count the "local" share divides a cluster-scoped limit by.`,
		value: use(integer(1), func(t *Target) *int { return &t.Policy.ExpectedReplicas })},
	{Name: "LeasePermits", Type: "integer", Default: "none (a round trip per call)", Bounds: positiveInt, Reloadable: true, Inherited: true,
		Doc:   "Permits a replica takes from a cluster-scoped window in one store round trip and admits locally (docs/cluster.md, leases).",
		value: use(integer(1), func(t *Target) *int { return &t.Policy.LeasePermits })},
	{Name: "Shadow", Type: "boolean", Default: "false", Bounds: "true or false", Reloadable: true, Inherited: true,
		Doc:   "Counts the calls the breaker, windows (per-key ones too) and concurrency limit would turn away or shed, and turns none away. Not Adaptive.Shadow, which enforces the static limit.",
		value: use(boolean, func(t *Target) *bool { return &t.Policy.Shadow })},
	{Name: "RateLimitHeaders", Type: "boolean", Default: "false", Bounds: "true or false", Reloadable: true, Inherited: true,
		Doc:   "Publishes the rate limit's quota in the RateLimit-Policy and RateLimit response fields.",
		value: use(boolean, func(t *Target) *bool { return &t.Policy.RateLimitHeaders })},
	{Name: "Limits", Type: "object", Default: "none", Bounds: fmt.Sprintf("1 to %d limit kinds, each an object", MaxCustomLimits), Reloadable: true, Inherited: true,
		Doc:   "Limits of your own kinds, after the built-ins: kind (registered with kernel.WithLimitKind) -> its configuration.",
		value: use(limitKinds, func(t *Target) *string { return &t.Custom.Limits })},
	{Name: "PerKey.PermitLimit", Type: "integer", Default: "none (no per-key limit)", Bounds: positiveInt, Reloadable: true,
		Doc:   "Calls admitted per window for each key (tenant, API key), counted in the operation's Scope (docs/cluster.md).",
		value: use(integer(1), func(t *Target) *int { return &t.Policy.PerKey.PermitLimit })},
	{Name: "PerKey.WindowSeconds", Type: "number", Default: "1", Bounds: seconds, Reloadable: true,
		Doc:   "Length of each key's fixed window, in seconds.",
		value: withDefault(duration, func(t *Target) *Duration { return &t.Policy.PerKey.Window }, resilience.DefaultWindow)},
	{Name: "PerKey.QueueLimit", Type: "integer", Default: "0", Bounds: "0 to 2147483647", Reloadable: true,
		Doc:   "Calls of one key that may wait for a later window.",
		value: use(integer(0), func(t *Target) *int { return &t.Policy.PerKey.QueueLimit })},
	{Name: "PerKey.Baggage", Type: "string", Default: `"tenant"`, Bounds: "1 to 64 letters, digits, '-', '_' or '.'", Reloadable: true,
		Doc:   "Baggage member (HTTP baggage header, gRPC baggage metadata) whose value is the call's key.",
		value: use(baggageMember, func(t *Target) *string { return &t.Policy.PerKey.Baggage })},
	{Name: "Stream.MaxStreams", Type: "integer", Default: "unlimited", Bounds: positiveInt, Reloadable: true, Inherited: true,
		Doc:   "Streams of a streaming operation open at once, counted in its Scope; the next is refused with KERNEL_UNAVAILABLE_003.",
		value: use(integer(1), func(t *Target) *int { return &t.Stream.MaxStreams })},
	{Name: "Stream.IdleSeconds", Type: "number", Default: "none", Bounds: seconds, Reloadable: true, Inherited: true,
		Doc:   "Ends a stream when no message was sent or received for it (KERNEL_TIMEOUT_003); heartbeats do not count, in seconds.",
		value: use(duration, func(t *Target) *Duration { return &t.Stream.Idle })},
	{Name: "Stream.SendStallSeconds", Type: "number", Default: "30", Bounds: seconds, Reloadable: true, Inherited: true,
		Doc:   "Ends a stream when one send waits for the caller to read for it (KERNEL_CANCELLED_002), in seconds.",
		value: withDefault(duration, func(t *Target) *Duration { return &t.Stream.SendStall }, DefaultSendStall)},
	{Name: "Stream.MessagesPerSecond", Type: "number", Default: "unlimited", Bounds: "> 0, at most 1e9", Reloadable: true, Inherited: true,
		Doc:   "Rate of the caller's messages: each waits for its turn, so flow control pushes back.",
		value: use(rate, func(t *Target) *float64 { return &t.Stream.MessagesPerSecond })},
	{Name: "Stream.HardRate", Type: "boolean", Default: "false", Bounds: "true or false", Reloadable: true, Inherited: true,
		Doc:   "Ends the stream (KERNEL_UNAVAILABLE_011, with a retry-after) when the caller runs a second ahead of MessagesPerSecond, instead of pacing it.",
		value: use(boolean, func(t *Target) *bool { return &t.Stream.HardRate })},
	{Name: "Stream.MaxMessages", Type: "integer", Default: "unlimited", Bounds: positiveInt, Reloadable: true, Inherited: true,
		Doc:   "Messages the caller may send on one stream; the next ends it (KERNEL_VALIDATION_010).",
		value: use(integer(1), func(t *Target) *int { return &t.Stream.MaxMessages })},
	{Name: "Stream.MaxStreamBytes", Type: "integer", Default: "unlimited", Bounds: positiveInt, Reloadable: true, Inherited: true,
		Doc:   "Bytes the caller may send on one stream; more ends it (KERNEL_VALIDATION_011).",
		value: use(integer(1), func(t *Target) *int { return &t.Stream.MaxBytes })},
	{Name: "Stream.HeartbeatSeconds", Type: "number", Default: "none", Bounds: seconds, Reloadable: true, Inherited: true,
		Doc:   "Period of the transport's heartbeats on a stream that sent nothing for it, in seconds.",
		value: use(duration, func(t *Target) *Duration { return &t.Stream.Heartbeat })},
	{Name: "Stream.MaxAgeSeconds", Type: "number", Default: "none", Bounds: seconds, Reloadable: true, Inherited: true,
		Doc:   "Age at which a stream ends with KERNEL_UNAVAILABLE_012 and a retry-after, so callers reconnect elsewhere, in seconds.",
		value: use(duration, func(t *Target) *Duration { return &t.Stream.MaxAge })},
	{Name: "Stream.MaxAgeJitter", Type: "number", Default: "0.1", Bounds: "0 to 0.999", Reloadable: true, Inherited: true,
		Doc:   "Fraction of MaxAgeSeconds by which each stream's age is drawn shorter at random, so reconnections spread.",
		value: withDefault(fraction, func(t *Target) *float64 { return &t.Stream.MaxAgeJitter }, DefaultMaxAgeJitter)},
	{Name: "Idempotency.Enabled", Type: "boolean", Default: "true", Bounds: "true or false",
		Doc:   "Turns idempotency keys on for the operation (docs/idempotency.md).",
		value: withDefault(boolean, func(t *Target) *bool { return &t.Idempotency.Enabled }, true)},
	{Name: "Idempotency.Required", Type: "boolean", Default: "false", Bounds: "true or false",
		Doc:   "Rejects a call that brings no idempotency key.",
		value: use(boolean, func(t *Target) *bool { return &t.Idempotency.Required })},
	{Name: "Idempotency.RetentionSeconds", Type: "number", Default: "86400", Bounds: seconds,
		Doc:   "How long a finished outcome is replayed, in seconds.",
		value: use(duration, func(t *Target) *Duration { return &t.Idempotency.Retention })},
	{Name: "Idempotency.MaxOutcomeBytes", Type: "integer", Default: "65536", Bounds: fmt.Sprintf("1 to %d", maxOutcomeBytes),
		Doc:   "Largest outcome kept for a replay, in bytes; a repeat of a larger one gets 409.",
		value: use(bounded(1, maxOutcomeBytes), func(t *Target) *int { return &t.Idempotency.MaxOutcomeBytes })},
}
