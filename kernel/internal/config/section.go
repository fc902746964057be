package config

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/resilience"
	"github.com/sundial-go/sundial/resilience/idempotency"
)

// Values are the keys one object of the section sets (its root, or one
// operation's overrides): parsed values by Key.Name, and the objects
// (Idempotency) it writes, even empty.
type Values struct {
	set     map[string]any
	objects map[string]bool
}

func (v *Values) put(name string, x any) {
	if v.set == nil {
		v.set = make(map[string]any)
	}
	v.set[name] = x
}

func (v *Values) putObject(name string) {
	if v.objects == nil {
		v.objects = make(map[string]bool)
	}
	v.objects[name] = true
}

// has reports whether v sets the key.
func (v Values) has(k Key) bool {
	_, ok := v.set[k.Name]
	return ok
}

// Policies is the parsed section: defaults for every operation, and
// per-operation overrides that replace defaults key by key. Its zero
// value configures nothing.
type Policies struct {
	defaults   Values
	operations map[string]Values
}

// Resolve returns the merged keys of the operation id: its overrides,
// then the section's defaults for the keys it does not set (see
// Key.Inherited), then the built-in defaults. A disabled Idempotency
// policy is the zero idempotency.Policy.
func (o Policies) Resolve(id string) Target {
	v := o.defaults
	if op, ok := o.operations[id]; ok {
		v = merge(o.defaults, op)
	}
	var t Target
	for _, k := range Keys {
		if obj := k.object(); obj != "" && !v.objects[obj] {
			continue
		}
		k.value.apply(&t, v.set[k.Name])
	}
	if !t.Idempotency.Enabled {
		t.Idempotency = idempotency.Policy{}
	}
	return t
}

// merge returns the operation's values over the section's defaults.
func merge(defaults, op Values) Values {
	var out Values
	for obj := range defaults.objects {
		out.putObject(obj)
	}
	for obj := range op.objects {
		out.putObject(obj)
	}
	for _, k := range Keys {
		src := op
		if !op.has(k) && (k.Inherited || (k.object() != "" && !op.objects[k.object()])) {
			src = defaults
		}
		if x, ok := src.set[k.Name]; ok {
			out.put(k.Name, x)
		}
	}
	return out
}

// Sets reports whether the operation id sets the key name itself (rather
// than inheriting it from the section's root).
func (o Policies) Sets(id, name string) bool {
	op, ok := o.operations[id]
	_, set := op.set[name]
	return ok && set
}

// OperationIDs returns the IDs that have overrides, sorted.
func (o Policies) OperationIDs() []string {
	return slices.Sorted(maps.Keys(o.operations))
}

// Parse parses the section. raw is the section as decoded from JSON (a
// map[string]any; nil means an empty section) and path is its key path
// for error messages, e.g. "Sundial.Kernel.Resilience".
//
// Every error names the full key path: an unknown key (a typo must not
// silently disable a limit), a value of the wrong type or out of bounds,
// or a malformed operation ID under Operations.
func Parse(raw any, path string) (Policies, error) {
	var o Policies
	if raw == nil {
		return o, nil
	}
	m, ok := raw.(map[string]any)
	if !ok {
		return o, fmt.Errorf("kernel: %s: want an object, got %s", path, JSONType(raw))
	}
	for _, name := range slices.Sorted(maps.Keys(m)) {
		var err error
		if name == OperationsKey {
			err = o.parseOperations(m[name], path+"."+name)
		} else {
			err = o.defaults.parseKey(name, m[name], path+"."+name)
		}
		if err != nil {
			return Policies{}, err
		}
	}
	if err := check(o.Resolve(""), path); err != nil {
		return Policies{}, err
	}
	for _, id := range o.OperationIDs() {
		if err := check(o.Resolve(id), path+"."+OperationsKey+"."+id); err != nil {
			return Policies{}, err
		}
	}
	return o, nil
}

// check refuses what the keys of one object of the section (at path) say
// together that none says alone.
func check(t Target, path string) error {
	a := t.Policy.Adaptive
	switch {
	case a.Shadow && t.Policy.ConcurrencyLimit == resilience.AdaptiveLimit:
		return fmt.Errorf("kernel: %s.Adaptive.Shadow: a shadow runs beside a static ConcurrencyLimit, not with \"adaptive\"", path)
	case a.MinLimit > 0 && a.MaxLimit > 0 && a.MinLimit > a.MaxLimit:
		return fmt.Errorf("kernel: %s.Adaptive.MaxLimit: %d is below MinLimit %d", path, a.MaxLimit, a.MinLimit)
	}
	return nil
}

func (o *Policies) parseOperations(raw any, path string) error {
	if raw == nil {
		return nil
	}
	ops, ok := raw.(map[string]any)
	if !ok {
		return fmt.Errorf("kernel: %s: want an object of operation IDs, got %s", path, JSONType(raw))
	}
	o.operations = make(map[string]Values, len(ops))
	for _, id := range slices.Sorted(maps.Keys(ops)) {
		if err := operations.ValidateID(id); err != nil {
			return fmt.Errorf("kernel: %s.%s: %w", path, id, err)
		}
		v, err := parseOperation(ops[id], path+"."+id)
		if err != nil {
			return err
		}
		o.operations[id] = v
	}
	return nil
}

// parseOperation parses one operation's overrides.
func parseOperation(raw any, path string) (Values, error) {
	var v Values
	m, ok := raw.(map[string]any)
	if !ok {
		return v, fmt.Errorf("kernel: %s: want an object, got %s", path, JSONType(raw))
	}
	for _, name := range slices.Sorted(maps.Keys(m)) {
		if name == OperationsKey {
			return v, fmt.Errorf("kernel: %s.%s: Operations is only valid at the section's root", path, name)
		}
		if err := v.parseKey(name, m[name], path+"."+name); err != nil {
			return v, err
		}
	}
	return v, nil
}

// parseKey parses the key name of the section's root or of an operation:
// a key of the table, or an object of keys.
func (v *Values) parseKey(name string, raw any, path string) error {
	if sub := keysOf(name); len(sub) > 0 {
		return v.parseObject(name, sub, raw, path)
	}
	for _, k := range Keys {
		if k.Name == name {
			x, err := k.value.parse(raw, path)
			if err == nil {
				v.put(name, x)
			}
			return err
		}
	}
	top := topNames()
	for _, known := range top {
		if strings.EqualFold(known, name) {
			return fmt.Errorf("kernel: %s: unknown key; did you mean %q? (keys are case-sensitive)", path, known)
		}
	}
	return fmt.Errorf("kernel: %s: unknown key (known keys: %s, %s)", path, strings.Join(top, ", "), OperationsKey)
}

// parseObject parses the object obj, whose keys are sub.
func (v *Values) parseObject(obj string, sub []Key, raw any, path string) error {
	leaves := make([]string, len(sub))
	for i, k := range sub {
		leaves[i] = k.leaf()
	}
	m, ok := raw.(map[string]any)
	if !ok {
		return fmt.Errorf("kernel: %s: want an object (keys: %s), got %s", path, strings.Join(leaves, ", "), JSONType(raw))
	}
	v.putObject(obj)
	for _, name := range slices.Sorted(maps.Keys(m)) {
		p := path + "." + name
		i := slices.Index(leaves, name)
		if i < 0 {
			return fmt.Errorf("kernel: %s: unknown key (known keys: %s)", p, strings.Join(leaves, ", "))
		}
		x, err := sub[i].value.parse(m[name], p)
		if err != nil {
			return err
		}
		v.put(sub[i].Name, x)
	}
	return nil
}

// keysOf returns the keys of the object obj, in table order (none when
// obj is not an object of the section).
func keysOf(obj string) []Key {
	var sub []Key
	for _, k := range Keys {
		if k.object() == obj && obj != "" {
			sub = append(sub, k)
		}
	}
	return sub
}

// topNames returns the names of the section's keys at its root (a key, or
// an object of keys), in table order, without Operations.
func topNames() []string {
	var names []string
	for _, k := range Keys {
		n := k.Name
		if obj := k.object(); obj != "" {
			n = obj
		}
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	return names
}
