package resilience

import (
	"time"

	"github.com/sundial-go/sundial/pipeline"
)

// Policy is the resilience policy of one operation, as plain values (the
// kernel reads it from the configuration). The zero value configures
// nothing: the operation passes straight through.
type Policy struct {
	// PermitLimit is the number of calls admitted per Window; 0 means no
	// rate limit.
	PermitLimit int
	// Window is the fixed window's length (default 1s).
	Window time.Duration
	// QueueLimit is how many calls may wait for the next window when the
	// current one is used up (default 0: reject at once).
	QueueLimit int
	// ConcurrencyLimit is the number of calls executing at once; 0 means no
	// limit, and [AdaptiveLimit] (any negative value) the limit the
	// controller configured by Adaptive finds.
	ConcurrencyLimit int
	// ConcurrencyQueueLimit is how many calls may wait for a free slot.
	ConcurrencyQueueLimit int
	// Adaptive configures the adaptive concurrency limit: its controller
	// runs when ConcurrencyLimit is AdaptiveLimit, or beside a static
	// ConcurrencyLimit when Adaptive.Shadow is set.
	Adaptive Adaptive
	// Priority is the operation's class (docs/resilience.md, "Priority"):
	// a caller may lower it per call, never raise it. When the concurrency
	// limit is full, calls below it and sheddable ones are shed
	// (KERNEL_UNAVAILABLE_008) before calls at it.
	Priority pipeline.Priority
	// PriorityReserve is the fraction of ConcurrencyLimit (0 to 0.999,
	// rounded down to whole slots) that calls below Priority may not take;
	// 0 means none. The configuration's default is DefaultPriorityReserve.
	PriorityReserve float64
	// FailureThreshold is the number of consecutive failures that opens the
	// breaker; 0 means no breaker.
	FailureThreshold int
	// BreakDuration is how long the breaker stays open (default 30s).
	BreakDuration time.Duration
	// Timeout is the operation's default deadline when the caller sends
	// none, and a cap on what a caller sends; 0 means none.
	Timeout time.Duration

	// Scope is where the rate and concurrency limits are counted. It is
	// this process ("" or ScopeProcess), or every process sharing a store
	// (ScopeCluster). With ScopeCluster the kernel hands the shared
	// window and slots.
	Scope Scope
	// StoreTimeout bounds every call to the shared store (Scope cluster);
	// 0 means the store's default.
	StoreTimeout time.Duration
	// DegradeAfter is how many store calls in a row must fail before a
	// cluster-scoped limit turns to OnStoreError, at most 100; 0 means the
	// store's default (3).
	DegradeAfter int
	// OnStoreError is what a cluster-scoped limit does while its store is
	// slow or unreachable. "local", the default, enforces this replica's
	// share; "open" admits; "closed" rejects.
	OnStoreError string
	// ExpectedReplicas, when positive, is the replica count the "local"
	// share is computed with instead of the live count the store learns.
	ExpectedReplicas int
	// PerKey is a rate limit per key (tenant, API key), counted in the
	// operation's Scope; the zero value is none.
	PerKey PerKey
	// LeasePermits, when above 1, makes a cluster-scoped window lease. A
	// replica takes up to that many permits of the current window in one
	// store round trip. It admits from them with no round trip, until they
	// are used or the window ends (docs/cluster.md, "Leases"). 0 or 1
	// means one round trip per call. Process scope ignores it.
	LeasePermits int
	// Shadow puts the operation's breaker, fixed window and concurrency
	// limit in shadow mode. Each still counts and decides. But a call it
	// would turn away runs, and is counted in LimitsState.Shadowed. Shadow
	// limits never make a call wait: the queue limits do not apply. Limits
	// of your own (WithLimit) still enforce.
	Shadow bool
	// RateLimitHeaders publishes the rate limit's quota on each call
	// (pipeline.Invocation.Quota), for the RateLimit-Policy and RateLimit
	// response fields.
	RateLimitHeaders bool
}

// Limited reports whether the policy configures a breaker, a rate limit or
// a concurrency limit (the Timeout is the deadline middleware's business).
func (p Policy) Limited() bool {
	return p.PermitLimit > 0 || p.ConcurrencyLimit != 0 || p.Adaptive.Shadow || p.FailureThreshold > 0 || p.PerKey.PermitLimit > 0
}

// AdaptiveLimit is the ConcurrencyLimit of an adaptive concurrency limit
// (in JSON, "ConcurrencyLimit": "adaptive"). The limit moves to what the
// operation serves without queueing, as its latency shows. It leaves room
// for bursts while the load offered fits under it. See
// docs/resilience.md, "Adaptive concurrency".
const AdaptiveLimit = -1

// Adaptive configures the controller of an adaptive concurrency limit. Its
// zero value takes the defaults, which work untuned. The limit is per
// process, whatever the Scope.
type Adaptive struct {
	// MinLimit and MaxLimit bound the limit (defaults 1 and 1000; a
	// MaxLimit below MinLimit is raised to it). InitialLimit is where it
	// starts (default 20, clamped to the bounds).
	MinLimit, MaxLimit, InitialLimit int
	// Window is the shortest time the controller measures before it moves
	// the limit (default 1s); a window also waits for 10 calls to end.
	Window time.Duration
	// HealthyLatency is the healthy-latency ceiling: while the mean latency
	// of a window is above it, the limit never grows. 0 means none.
	HealthyLatency time.Duration
	// Shadow runs the controller beside the static ConcurrencyLimit, which
	// stays the one enforced (none when 0): the limit the controller would
	// apply is reported (LimitsState.AdaptiveLimit), not applied. It is
	// ignored when ConcurrencyLimit is AdaptiveLimit.
	Shadow bool
}

// adaptive reports whether the policy runs an adaptive controller, and
// whether the controller's limit is enforced.
func (p Policy) adaptive() (runs, enforced bool) {
	enforced = p.ConcurrencyLimit < 0
	return enforced || p.Adaptive.Shadow, enforced
}

// Default values of the keys that have one.
const (
	DefaultWindow        = time.Second
	DefaultBreakDuration = 30 * time.Second
	// DefaultPriorityReserve is the configuration's PriorityReserve.
	DefaultPriorityReserve = 0.2
)
