package kernel

import (
	"context"
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"strings"

	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience/cluster"
	"github.com/sundial-go/sundial/resilience/idempotency"
)

type idemOptions struct {
	store idempotency.Store
	scope func(ctx context.Context, inv *pipeline.Invocation) string
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
func WithIdempotencyScope(f func(ctx context.Context, inv *pipeline.Invocation) string) Option {
	return optionFunc(func(o *options) { o.idem.scope = f })
}

// idempotencyStoreSettings is the parsed section
// Sundial.Kernel.IdempotencyStore: the bounds of the in-process store of
// idempotency records, which the kernel uses when it has no Redis client
// and no WithIdempotencyStore. Read at start-up only.
type idempotencyStoreSettings struct {
	// MaxRecords bounds the records (key MaxRecords, integer from 1 to
	// 100,000,000; default 100,000).
	MaxRecords int
	// MaxBytes bounds the bytes accounted for the records (key MaxBytes,
	// integer from 1 MiB to 1 TiB; default 64 MiB).
	MaxBytes int64
}

var idemStoreKeys = []string{"MaxRecords", "MaxBytes"}

// parseIdempotencyStore validates Sundial.Kernel.IdempotencyStore.
func parseIdempotencyStore(raw any, path string) (*idempotencyStoreSettings, error) {
	m, ok := raw.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("kernel: %s: want an object, got %s", path, jsonType(raw))
	}
	st := &idempotencyStoreSettings{}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		v, p := m[k], path+"."+k
		f, isNum := number(v)
		switch k {
		case "MaxRecords":
			if !isNum || f != math.Trunc(f) || f < 1 || f > 1e8 {
				return nil, fmt.Errorf("kernel: %s: want an integer from 1 to 100000000, got %v", p, v)
			}
			st.MaxRecords = int(f)
		case "MaxBytes":
			if !isNum || f != math.Trunc(f) || f < 1<<20 || f > 1<<40 {
				return nil, fmt.Errorf("kernel: %s: want an integer from 1048576 (1 MiB) to 1099511627776 (1 TiB), got %v", p, v)
			}
			st.MaxBytes = int64(f)
		default:
			return nil, fmt.Errorf("kernel: %s: unknown key (known keys: %s)", p, strings.Join(idemStoreKeys, ", "))
		}
	}
	return st, nil
}

// setUpIdempotency picks the store when some operation enables idempotency
// keys. An operation whose output type is an interface cannot take them. A
// replay decodes the stored output into the output type. JSON cannot restore
// the dynamic type behind an interface. So the first call would succeed and
// every replay fail.
func (k *Kernel) setUpIdempotency(o *options, pols policies) error {
	for _, d := range o.registry.All() {
		if p := pols.idempotencyFor(d.ID); p.Enabled {
			if t := d.Output; t != nil && t.Kind() == reflect.Interface {
				return fmt.Errorf("kernel: Sundial.Kernel.Resilience.Operations.%s.Idempotency: the operation's output type %v is an interface; a replayed outcome is decoded into the output type, so an operation that takes idempotency keys needs a concrete one", d.ID, t)
			}
			if k.idemPol == nil {
				k.idemPol = make(map[string]idempotency.Policy)
			}
			k.idemPol[d.ID] = p
		}
	}
	if len(k.idemPol) == 0 {
		return nil
	}
	bounds := k.settings.IdempotencyStore
	if bounds != nil && (o.idem.store != nil || k.rdb != nil) {
		k.logger.Warn("kernel: Sundial.Kernel.IdempotencyStore bounds the in-process store only; this kernel keeps its idempotency records elsewhere (Redis or WithIdempotencyStore), so it is not used",
			"key", "Sundial.Kernel.IdempotencyStore")
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
		var c idempotency.MemoryConfig
		if bounds != nil {
			c.MaxEntries, c.MaxBytes = bounds.MaxRecords, bounds.MaxBytes
		}
		k.idemStore = idempotency.NewMemoryStore(c)
	}
	return nil
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
		Mark:      &k.replay,
	})
}

// codeIdempotencyKeyUnsupported is errKeysUnsupported's code.
const codeIdempotencyKeyUnsupported = "KERNEL_VALIDATION_006"

// errKeysUnsupported answers a keyed call to an operation served by an
// application's own handler (Unary.Handler), whose outcome cannot be
// replayed.
func errKeysUnsupported() *pipeline.Error {
	return pipeline.NewError(pipeline.KindValidation, codeIdempotencyKeyUnsupported,
		"This method cannot take idempotency keys: it is served by the application's own handler, whose answer Sundial cannot replay. A key came with the call (idempotency-key metadata, or the sundial.idempotency-key baggage member an upstream call passed on); call it without one, or serve the operation through Sundial's handler.")
}
