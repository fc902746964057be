package config

import "slices"

// Diff returns the names of the keys whose value differs between was
// (in force) and is (just read): those a reload applies, and those it
// ignores because they are read at start-up only.
func Diff(was, is Target) (applied, ignored []string) {
	for _, k := range Keys {
		if k.value.equal(&was, &is) {
			continue
		}
		if k.Reloadable {
			applied = append(applied, k.Name)
		} else {
			ignored = append(ignored, k.Name)
		}
	}
	return applied, ignored
}

// TopLevel returns the distinct names the keys are written under at an
// operation's root: Idempotency for Idempotency.Enabled. It keeps the
// order of names.
func TopLevel(names []string) []string {
	var out []string
	for _, n := range names {
		k := Key{Name: n}
		if obj := k.object(); obj != "" {
			n = obj
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

// Names returns every name that appears in the section's key paths
// (Operations, the keys, their objects and the keys inside those): the
// canonical spellings environment variable names are mapped to.
func Names() []string {
	names := append([]string{OperationsKey}, topNames()...)
	for _, k := range Keys {
		if k.object() != "" {
			names = append(names, k.leaf())
		}
	}
	return names
}
