package kernel

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"

	"github.com/sundial-go/sundial/kernel/internal/config"
	"github.com/sundial-go/sundial/resilience"
)

// limitKind builds a limit of its kind for an operation (WithLimitKind).
type limitKind = func(id string, config json.RawMessage) (resilience.Limit, error)

// WithLimitKind registers the limit kind name, so that the configuration can
// put limits of that kind on operations:
//
//	"Operations": {"orders.create": {"Limits": {"tenant-inflight": {"PerTenant": 2}}}}
//
// Each operation gets its own limit, built by build, after the built-in
// limits and right before the handler. build gets the operation's ID and the
// object the kind names in its Limits key (docs/policy-keys.md). An error
// refuses the configuration, at New or at a reload, with the key path. A
// reload that changes an operation's Limits builds its limits anew. Calls
// holding the old ones finish under them. A reload that leaves them as they
// are keeps them.
//
// A limit that implements io.Closer is closed once it has left the chain.
// That is after the reload that replaced or dropped it, and after a refused
// reload for one built for it. Kernel.Close closes it too. Calls that met it
// before may still give back their permits after Close, so its Release must
// keep working. Return a new limit from each build. One shared by operations
// is closed when the first of them drops it.
func WithLimitKind(name string, build func(id string, config json.RawMessage) (resilience.Limit, error)) Option {
	return optionFunc(func(o *options) {
		if name == "" || build == nil {
			o.errs = append(o.errs, fmt.Errorf("kernel: WithLimitKind(%q): want a name and a build function", name))
			return
		}
		if o.limitKinds == nil {
			o.limitKinds = make(map[string]limitKind)
		}
		o.limitKinds[name] = build
	})
}

// customLimits is the limits of your own kinds of one operation and the
// configuration they were built from.
type customLimits struct {
	from string // config.Custom.Limits
	opts []resilience.Option
	lims []resilience.Limit // as built, for close
}

// close closes the limits of c that are io.Closers; an error is logged. c has
// left the chain of the operation id, or never entered it.
func (k *Kernel) closeCustom(id string, c customLimits) {
	for _, lim := range c.lims {
		if cl, ok := lim.(io.Closer); ok {
			if err := closeLimit(cl); err != nil {
				k.logger.Warn("kernel: closing a limit of your own kind", "operation", id, "error", err.Error())
			}
		}
	}
}

// closeLimit closes cl, a panic in its Close returned as an error (a
// reload or Kernel.Close must not crash on it).
func closeLimit(cl io.Closer) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("Close panicked: %v", p)
		}
	}()
	return cl.Close()
}

// buildCustom builds the limits of your own kinds of the operation id from
// its Limits configuration from. The policies ps resolve that configuration.
// It returns old when from is old's. Errors name the key path of the Limits
// object that set them. The limits built before the error are closed.
func (k *Kernel) buildCustom(ps policies, id, from string, old customLimits) (c customLimits, err error) {
	if from == old.from {
		return old, nil
	}
	defer func() {
		if err != nil {
			k.closeCustom(id, c)
			c.lims = nil
		}
	}()
	return k.buildKinds(ps, id, from)
}

// buildKinds builds the limits of the Limits configuration from.
func (k *Kernel) buildKinds(ps policies, id, from string) (customLimits, error) {
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
			if lim != nil && !isNilPointer(lim) {
				c.lims = append(c.lims, lim) // closed with the others
			}
			return c, fmt.Errorf("kernel: %s.%s: %w", ps.limitsPath(id), name, err)
		}
		c.opts = append(c.opts, resilience.WithLimit(lim))
		c.lims = append(c.lims, lim)
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
