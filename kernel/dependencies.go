package kernel

import (
	"maps"

	"github.com/sundial-go/sundial/resilience/outbound"
)

// Dependency returns the outbound policy runner of the dependency name,
// configured under Sundial.Kernel.Dependencies.<name> (docs/outbound.md),
// or nil when the configuration names no such dependency. Give it to
// httpadapter.WithDependency, grpcadapter.WithCallDependency, or call its
// Do around any other client. A reload changes its policy in place: its
// budget and breaker keep their state, and the same *outbound.Dependency
// stays valid. A dependency that a reload removes keeps its last policy
// until a restart.
func (k *Kernel) Dependency(name string) *outbound.Dependency {
	if m := k.deps.Load(); m != nil {
		return (*m)[name]
	}
	return nil
}

// applyDependencies puts the validated policies ps in force: the known
// dependencies are reconfigured in place, new ones created. New and
// Reload (under reloadMu) call it; readers never lock.
func (k *Kernel) applyDependencies(ps map[string]outbound.Policy) {
	next := map[string]*outbound.Dependency{}
	if m := k.deps.Load(); m != nil {
		maps.Copy(next, *m)
	}
	for name, p := range ps {
		d, ok := next[name]
		if !ok {
			d, _ = outbound.New(name, p) // p was validated by config.ParseDependencies
			next[name] = d
			continue
		}
		_ = d.Reconfigure(p)
	}
	k.deps.Store(&next)
}
