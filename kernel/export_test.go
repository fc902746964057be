package kernel

import (
	"github.com/redis/go-redis/v9"

	"github.com/sundial-go/sundial/resilience"
	"github.com/sundial-go/sundial/resilience/cluster"
	"github.com/sundial-go/sundial/resilience/idempotency"
)

// WithEnviron replaces os.Environ as the source of WithEnv's variables.
var WithEnviron = withEnviron

// Test-only views of the kernel.

// Stragglers returns the number of invocations still running after their
// answer left at the deadline (or when their caller went away).
func (k *Kernel) Stragglers() int { return int(k.stragglers.Load()) }

// IdempotencyOutlivesProcess reports whether the kernel's idempotency
// records outlive the process (a store with a lease, such as Redis): only
// then can a later process — a CLI rerun, another replica — find them.
func (k *Kernel) IdempotencyOutlivesProcess() bool {
	return k.idemStore != nil && k.idemStore.Lease() > 0
}

// Settings returns the parsed Sundial.Kernel section: the startup-only
// keys as at New, MaxTimeoutSeconds and MaxStragglers as last reloaded.
func (k *Kernel) Settings() parsedSettings {
	s := k.settings
	lc := k.live.Load()
	s.MaxTimeout, s.MaxStragglers = lc.maxTimeout, lc.maxStragglers
	return s
}

// Redis returns the kernel's Redis client (WithRedis, or the one it made
// from Sundial.Kernel.Redis), or nil when it has none.
func (k *Kernel) Redis() redis.UniversalClient { return k.rdb }

// ClusterStore returns the store of the kernel's cluster-scoped limits, or
// nil when no operation is cluster-scoped.
func (k *Kernel) ClusterStore() *cluster.Store { return k.store.Load() }

// Reloads returns how many reloads ended with each result (ReloadOK,
// ReloadInvalid, ReloadUnchanged) since New.
func (k *Kernel) Reloads() map[string]int64 {
	m := make(map[string]int64, len(reloadResults))
	for i, r := range reloadResults {
		m[r] = k.reloads[i].Load()
	}
	return m
}

// Limits returns the limits of the operation id (nil: none).
func (k *Kernel) Limits(id string) *resilience.Limits { return k.limitsOf(id) }

// DefaultMaxTimeout is MaxTimeoutSeconds when the config does not set it.
const DefaultMaxTimeout = defaultMaxTimeout

// ErrNoConfigFile is WatchConfig's error for a kernel made without a
// config file.
var ErrNoConfigFile = errNoConfigFile

// Op returns the handle of the operation id, or nil. Adapters keep the
// handles Operations returns; tests find one by ID.
func (k *Kernel) Op(id string) *Op {
	for _, op := range k.handles {
		if op.c.desc.ID == id {
			return op
		}
	}
	return nil
}

// IdempotencyStore returns the store of the kernel's idempotency records
// (nil when no operation takes keys).
func (k *Kernel) IdempotencyStore() idempotency.Store { return k.idemStore }

// PolicyFor returns the merged resilience policy of the operation id,
// registered or not (the zero Policy when the built-in middleware is off).
func (k *Kernel) PolicyFor(id string) resilience.Policy { return k.policyFor(id) }

// The reload results, named as the metric names them.
const (
	ReloadOK        = reloadOK
	ReloadInvalid   = reloadInvalid
	ReloadUnchanged = reloadUnchanged
)

// ReloadResult names the result of a reload that returned changed, err.
func ReloadResult(changed bool, err error) (string, error) {
	switch {
	case err != nil:
		return reloadInvalid, err
	case changed:
		return reloadOK, nil
	}
	return reloadUnchanged, nil
}
