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
	// limit.
	ConcurrencyLimit int
	// ConcurrencyQueueLimit is how many calls may wait for a free slot.
	ConcurrencyQueueLimit int
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

	// Scope is where the rate and concurrency limits are counted: this
	// process ("" or ScopeProcess) or every process sharing a store
	// (ScopeCluster; the kernel hands the shared window and slots).
	Scope Scope
	// StoreTimeout bounds every call to the shared store (Scope cluster);
	// 0 means the store's default.
	StoreTimeout time.Duration
	// OnStoreError is what a cluster-scoped limit does while its store is
	// slow or unreachable: "local" (enforce this replica's share, the
	// default), "open" (admit) or "closed" (reject).
	OnStoreError string
	// ExpectedReplicas, when positive, is the replica count the "local"
	// share is computed with instead of the live count the store learns.
	ExpectedReplicas int
	// RateLimitHeaders publishes the rate limit's quota on each call
	// (pipeline.Invocation.Quota), for the RateLimit-Policy and RateLimit
	// response fields.
	RateLimitHeaders bool
}

// Limited reports whether the policy configures a breaker, a rate limit or
// a concurrency limit (the Timeout is the DeadlineMiddleware's business).
func (p Policy) Limited() bool {
	return p.PermitLimit > 0 || p.ConcurrencyLimit > 0 || p.FailureThreshold > 0
}

// Default values of the keys that have one.
const (
	DefaultWindow        = time.Second
	DefaultBreakDuration = 30 * time.Second
	// DefaultPriorityReserve is the configuration's PriorityReserve.
	DefaultPriorityReserve = 0.2
)
