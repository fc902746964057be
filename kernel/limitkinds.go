package kernel

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/sundial-go/sundial/kernel/internal/config"
	"github.com/sundial-go/sundial/resilience"
)

// LimitKind builds a limit of your own for the operation id from its
// configuration: the object the kind names in the operation's Limits key
// (docs/policy-keys.md). An error refuses the configuration, at New or at
// a reload, with the key path.
type LimitKind func(id string, config json.RawMessage) (resilience.Limit, error)

// WithLimitKind registers the limit kind name, so that the configuration
// can put limits of that kind on operations:
//
//	"Operations": {"orders.create": {"Limits": {"tenant-inflight": {"PerTenant": 2}}}}
//
// Each operation gets its own limit, built by build, after the built-in
// limits and right before the handler. A reload that changes an
// operation's Limits builds its limits anew (calls holding the old ones
// finish under them); one that leaves them as they are keeps them.
func WithLimitKind(name string, build LimitKind) Option {
	return optionFunc(func(o *options) {
		if name == "" || build == nil {
			o.errs = append(o.errs, fmt.Errorf("kernel: WithLimitKind(%q): want a name and a build function", name))
			return
		}
		if o.limitKinds == nil {
			o.limitKinds = make(map[string]LimitKind)
		}
		o.limitKinds[name] = build
	})
}

// customLimits is the limits of your own kinds of one operation and the
// configuration they were built from.
type customLimits struct {
	from string // config.Custom.Limits
	opts []resilience.Option
}

// buildCustom builds the limits of your own kinds of the operation id
// from its Limits configuration from (as the policies ps resolve it), or
// returns old when from is old's. Errors name the key path of the Limits
// object that set them.
func (k *Kernel) buildCustom(ps policies, id, from string, old customLimits) (customLimits, error) {
	if from == old.from {
		return old, nil
	}
	c := customLimits{from: from}
	if from == "" {
		return c, nil
	}
	var kinds map[string]json.RawMessage
	if err := json.Unmarshal([]byte(from), &kinds); err != nil {
		return c, fmt.Errorf("kernel: %s: %w", ps.limitsPath(id), err)
	}
	for _, name := range slices.Sorted(maps.Keys(kinds)) {
		build := k.opts.limitKinds[name]
		if build == nil {
			return c, fmt.Errorf("kernel: %s.%s: unknown limit kind (registered: %v)", ps.limitsPath(id), name, slices.Sorted(maps.Keys(k.opts.limitKinds)))
		}
		lim, err := build(id, kinds[name])
		if err == nil && (lim == nil || isNilPointer(lim)) {
			err = fmt.Errorf("the kind's build function returned no limit")
		}
		if err != nil {
			return c, fmt.Errorf("kernel: %s.%s: %w", ps.limitsPath(id), name, err)
		}
		c.opts = append(c.opts, resilience.WithLimit(lim))
	}
	return c, nil
}

// limitsPath returns the key path of the Limits object the operation id
// takes: its own, or the section's.
func (o policies) limitsPath(id string) string {
	if o.Sets(id, "Limits") {
		return resilienceSection + ".Operations." + id + ".Limits"
	}
	return resilienceSection + ".Limits"
}

// resilienceSection is the key path of the section of policies.
const resilienceSection = "Sundial.Kernel.Resilience"

// customTarget returns what is in force of the operation's Limits key.
func (k *Kernel) customTarget(id string) config.Custom {
	return config.Custom{Limits: k.custom[id].from}
}

// setUpCustom builds every operation's limits of your own kinds, at New.
func (k *Kernel) setUpCustom(ps policies) error {
	k.custom = make(map[string]customLimits)
	if !k.settings.UseBuiltInMiddleware {
		return nil
	}
	for _, d := range k.registry.All() {
		c, err := k.buildCustom(ps, d.ID, ps.Resolve(d.ID).Custom.Limits, customLimits{})
		if err != nil {
			return err
		}
		k.custom[d.ID] = c
	}
	return nil
}
