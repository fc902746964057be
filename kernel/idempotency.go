package kernel

import (
	"reflect"

	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience/cluster"
	"github.com/sundial-go/sundial/resilience/idempotency"
)

type idemOptions struct {
	store idempotency.Store
	scope idempotency.ScopeFunc
}

// WithIdempotencyStore sets the store of idempotency records
// (docs/idempotency.md). Without it the kernel uses Redis when it has a
// client (Sundial.Kernel.Redis or WithRedis), so that replicas share the
// records, and otherwise an in-process store with the default bounds.
func WithIdempotencyStore(s idempotency.Store) Option {
	return optionFunc(func(o *options) { o.idem.store = s })
}

// WithIdempotencyScope sets the hook that returns the caller's principal
// or tenant, which scopes idempotency keys: two callers using the same key
// never see each other's outcome. It runs in the Handle stage, after
// authentication and tenant middleware, with their context.
func WithIdempotencyScope(f idempotency.ScopeFunc) Option {
	return optionFunc(func(o *options) { o.idem.scope = f })
}

// setUpIdempotency picks the store when some operation enables
// idempotency keys.
func (k *Kernel) setUpIdempotency(o *options, pols policies) {
	for _, d := range o.registry.All() {
		if p := pols.idempotencyFor(d.ID); p.Enabled {
			if k.idemPol == nil {
				k.idemPol = make(map[string]idempotency.Policy)
			}
			k.idemPol[d.ID] = p
		}
	}
	if len(k.idemPol) == 0 {
		return
	}
	switch {
	case o.idem.store != nil:
		k.idemStore = o.idem.store
	case k.rdb != nil:
		prefix := cluster.DefaultKeyPrefix
		if k.settings.Redis != nil && k.settings.Redis.KeyPrefix != "" {
			prefix = k.settings.Redis.KeyPrefix
		}
		k.idemStore = idempotency.NewRedisStore(k.rdb, prefix, 0)
	default:
		k.idemStore = idempotency.NewMemoryStore(idempotency.MemoryConfig{})
	}
}

// idempotencyMiddleware returns the operation's idempotency middleware, or
// nil when its policy does not enable it.
func (k *Kernel) idempotencyMiddleware(o *options, d *operations.Descriptor) pipeline.Middleware {
	p, ok := k.idemPol[d.ID]
	if !ok {
		return nil
	}
	var newOut func() any
	if t := d.Output; t != nil {
		newOut = func() any { return reflect.New(t).Interface() }
	}
	return idempotency.New(idempotency.Config{
		Operation: d.ID,
		Policy:    p,
		Store:     k.idemStore,
		Scope:     o.idem.scope,
		NewOutput: newOut,
		Logger:    k.logger,
	})
}

// IdempotencyPolicy returns the idempotency policy of operation id (the
// zero Policy, not Enabled, when it has none). The CLI adapter reads it to
// generate a key for an operation that takes one.
func (k *Kernel) IdempotencyPolicy(id string) idempotency.Policy { return k.idemPol[id] }

// IdempotencyStore returns the store of idempotency records, or nil when
// no operation enables them.
func (k *Kernel) IdempotencyStore() idempotency.Store { return k.idemStore }

// warnIdempotencyChanged logs the operations whose Idempotency policy a
// reload changes: it is compiled into the chain at New and read at
// start-up only.
func (k *Kernel) warnIdempotencyChanged(pols policies) {
	for _, d := range k.registry.All() {
		p := pols.idempotencyFor(d.ID)
		if !p.Enabled {
			p = idempotency.Policy{}
		}
		if p != k.idemPol[d.ID] {
			k.logger.Warn("kernel: Sundial.Kernel.Resilience.Operations."+d.ID+".Idempotency changed; it is read at start-up only and the change is ignored until a restart",
				"operation", d.ID)
		}
	}
}
