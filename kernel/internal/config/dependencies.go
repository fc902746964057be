package config

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/sundial-go/sundial/resilience/outbound"
)

// DependenciesKey is the key of Sundial.Kernel that maps a dependency's
// name to its outbound policy (docs/outbound.md).
const DependenciesKey = "Dependencies"

// DependencyKey is one row of the table of a dependency's keys: like Key,
// for the object Sundial.Kernel.Dependencies.<name>. Every key is
// reloadable; an unset key takes outbound.DefaultPolicy's value.
type DependencyKey struct {
	// Name is the key as written in JSON (Backoff.BaseMs inside the
	// object Backoff).
	Name string
	// Type, Default, Bounds and Doc are what the docs state.
	Type, Default, Bounds, Doc string
	// field is the outbound.Policy field the key sets, as its errors name
	// it.
	field string
	set   func(p *outbound.Policy, v any, path string) error
}

// setter is a key read by read into the field at returns.
func setter[T any](read func(any, string) (T, error), at func(*outbound.Policy) *T) func(*outbound.Policy, any, string) error {
	return func(p *outbound.Policy, v any, path string) error {
		x, err := read(v, path)
		if err == nil {
			*at(p) = x
		}
		return err
	}
}

// bounded reads an integer from lo to hi.
func bounded(lo, hi int) func(any, string) (int, error) {
	return func(v any, path string) (int, error) {
		n, err := integer(lo)(v, path)
		if err == nil && n > hi {
			return 0, fmt.Errorf("kernel: %s: %d is too large (at most %d)", path, n, hi)
		}
		return n, err
	}
}

// ratio reads a number from 0 to 1.
func ratio(v any, path string) (float64, error) {
	f, ok := Number(v)
	if !ok || math.IsNaN(f) || f < 0 || f > 1 {
		return 0, fmt.Errorf("kernel: %s: want a number from 0 to 1, got %s", path, describe(v))
	}
	return f, nil
}

// throttleK reads a throttle's K: a number from 1 to 100.
func throttleK(v any, path string) (float64, error) {
	f, ok := Number(v)
	if !ok {
		return 0, fmt.Errorf("kernel: %s: want a number from 1 to 100, got %s", path, describe(v))
	}
	if math.IsNaN(f) || f < 1 || f > 100 {
		return 0, fmt.Errorf("kernel: %s: want a number from 1 to 100, got %v", path, f)
	}
	return f, nil
}

// DependencyKeys is the table of a dependency's keys, in the order error
// messages and the docs list them.
var DependencyKeys = []DependencyKey{
	{Name: "Attempts", Type: "integer", Default: "3", Bounds: "1 to 10", field: "Attempts",
		Doc: "Most attempts of one call, the first and hedges included.",
		set: setter(bounded(1, 10), func(p *outbound.Policy) *int { return &p.Attempts })},
	{Name: "MinAttemptTimeoutMs", Type: "number", Default: "10", Bounds: "0.001 to 60000", field: "MinAttemptTimeout",
		Doc: "Least time an attempt needs: none starts with less of the deadline left, in milliseconds.",
		set: setter(milliseconds, func(p *outbound.Policy) *Duration { return &p.MinAttemptTimeout })},
	{Name: "AttemptTimeoutMs", Type: "number", Default: "none", Bounds: "0.001 to 60000", field: "AttemptTimeout",
		Doc: "Cap of one attempt, in milliseconds.",
		set: setter(milliseconds, func(p *outbound.Policy) *Duration { return &p.AttemptTimeout })},
	{Name: "Backoff.BaseMs", Type: "number", Default: "50", Bounds: "0.001 to 60000", field: "BackoffBase",
		Doc: "Backoff before the first retry, doubling with each, in milliseconds.",
		set: setter(milliseconds, func(p *outbound.Policy) *Duration { return &p.BackoffBase })},
	{Name: "Backoff.MaxMs", Type: "number", Default: "1000", Bounds: "0.001 to 60000, at least BaseMs", field: "BackoffMax",
		Doc: "Largest backoff, in milliseconds.",
		set: setter(milliseconds, func(p *outbound.Policy) *Duration { return &p.BackoffMax })},
	{Name: "Budget.Ratio", Type: "number", Default: "0.2", Bounds: "0 to 1", field: "BudgetRatio",
		Doc: "Retries and hedges earned per call.",
		set: setter(ratio, func(p *outbound.Policy) *float64 { return &p.BudgetRatio })},
	{Name: "Budget.Min", Type: "integer", Default: "10", Bounds: "0 to 1000000", field: "BudgetMin",
		Doc: "Tokens the budget starts with and holds at most.",
		set: setter(bounded(0, 1_000_000), func(p *outbound.Policy) *int { return &p.BudgetMin })},
	{Name: "Hedge.DelayMs", Type: "number", Default: "none (no hedging)", Bounds: "0.001 to 60000", field: "HedgeDelay",
		Doc: "Time without an answer after which another attempt starts, in milliseconds.",
		set: setter(milliseconds, func(p *outbound.Policy) *Duration { return &p.HedgeDelay })},
	{Name: "Hedge.SafeToHedge", Type: "boolean", Default: "false", Bounds: "true or false", field: "SafeToHedge",
		Doc: "Hedges calls without an idempotency key too (reads).",
		set: setter(boolean, func(p *outbound.Policy) *bool { return &p.SafeToHedge })},
	{Name: "Hedge.Quantile", Type: "number", Default: "none (fixed DelayMs)", Bounds: "0 to below 1", field: "HedgeQuantile",
		Doc: "Hedges after this quantile of the last 128 successful attempts' latency, once 20 are in; DelayMs until then.",
		set: setter(ratio, func(p *outbound.Policy) *float64 { return &p.HedgeQuantile })},
	{Name: "CreateIdempotencyKey", Type: "boolean", Default: "false", Bounds: "true or false", field: "CreateKey",
		Doc: "Gives a call without an idempotency key a fresh one, the same on every attempt.",
		set: setter(boolean, func(p *outbound.Policy) *bool { return &p.CreateKey })},
	{Name: "Breaker.FailureThreshold", Type: "integer", Default: "5", Bounds: "0 (no breaker) to 2147483647", field: "FailureThreshold",
		Doc: "Consecutive failed attempts that open the dependency's breaker.",
		set: setter(integer(0), func(p *outbound.Policy) *int { return &p.FailureThreshold })},
	{Name: "Breaker.BreakSeconds", Type: "number", Default: "5", Bounds: seconds, field: "BreakDuration",
		Doc: "How long the open breaker fails calls at once, in seconds.",
		set: setter(duration, func(p *outbound.Policy) *Duration { return &p.BreakDuration })},
	{Name: "Throttle.Enabled", Type: "boolean", Default: "false", Bounds: "true or false", field: "Throttle",
		Doc: "Refuses calls locally with probability max(0, (requests − K·accepts) / (requests + 1)) over the window.",
		set: setter(boolean, func(p *outbound.Policy) *bool { return &p.Throttle })},
	{Name: "Throttle.K", Type: "number", Default: "2", Bounds: "1 to 100", field: "ThrottleK",
		Doc: "Requests the throttle lets through per accepted one before it refuses any.",
		set: setter(throttleK, func(p *outbound.Policy) *float64 { return &p.ThrottleK })},
	{Name: "Throttle.WindowSeconds", Type: "number", Default: "10", Bounds: "0.02 to 1e9", field: "ThrottleWindow",
		Doc: "The throttle's sliding window, in 20 buckets, in seconds.",
		set: setter(duration, func(p *outbound.Policy) *Duration { return &p.ThrottleWindow })},
}

// ParseDependencies parses Sundial.Kernel.Dependencies (path): an object
// mapping each dependency's name to an object of DependencyKeys. Every
// error names its key path; a name must be 1 to 64 letters, digits, '.',
// '-' or '_'.
func ParseDependencies(raw any, path string) (map[string]outbound.Policy, error) {
	if raw == nil {
		return nil, nil
	}
	m, ok := raw.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("kernel: %s: want an object of dependency names, got %s", path, JSONType(raw))
	}
	out := make(map[string]outbound.Policy, len(m))
	for _, name := range slices.Sorted(maps.Keys(m)) {
		p := path + "." + name
		if !validDependencyName(name) {
			return nil, fmt.Errorf("kernel: %s: a dependency name is 1 to 64 letters, digits, '.', '-' or '_'", p)
		}
		pol, err := parseDependency(m[name], p)
		if err != nil {
			return nil, err
		}
		out[name] = pol
	}
	return out, nil
}

func validDependencyName(name string) bool {
	if name == "" || len(name) > 64 {
		return false
	}
	return strings.IndexFunc(name, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_')
	}) < 0
}

// parseDependency parses one dependency's object (path) over the defaults.
func parseDependency(raw any, path string) (outbound.Policy, error) {
	p := outbound.DefaultPolicy()
	if err := parseDependencyObject(&p, "", raw, path); err != nil {
		return p, err
	}
	if _, err := outbound.New("", p); err != nil {
		// A rule between keys (Backoff.MaxMs below Backoff.BaseMs): name
		// the first key it involves.
		msg := strings.SplitN(err.Error(), "\n", 2)[0]
		for _, k := range DependencyKeys {
			if rest, ok := strings.CutPrefix(msg, k.field+": "); ok {
				return p, fmt.Errorf("kernel: %s.%s: %s", path, k.Name, rest)
			}
		}
		return p, fmt.Errorf("kernel: %s: %w", path, err)
	}
	return p, nil
}

// parseDependencyObject parses the keys of the object obj ("" for the
// dependency's own object) into p.
func parseDependencyObject(p *outbound.Policy, obj string, raw any, path string) error {
	var known []string
	for _, k := range DependencyKeys {
		if o, leaf, nested := strings.Cut(k.Name, "."); obj == "" && !slices.Contains(known, o) {
			known = append(known, o)
		} else if nested && o == obj {
			known = append(known, leaf)
		}
	}
	m, ok := raw.(map[string]any)
	if !ok {
		return fmt.Errorf("kernel: %s: want an object (keys: %s), got %s", path, strings.Join(known, ", "), JSONType(raw))
	}
	for _, name := range slices.Sorted(maps.Keys(m)) {
		full := name
		if obj != "" {
			full = obj + "." + name
		}
		err := fmt.Errorf("kernel: %s.%s: unknown key (known keys: %s)", path, name, strings.Join(known, ", "))
		if i := slices.IndexFunc(DependencyKeys, func(k DependencyKey) bool { return k.Name == full }); i >= 0 {
			err = DependencyKeys[i].set(p, m[name], path+"."+name)
		} else if obj == "" && slices.ContainsFunc(DependencyKeys, func(k DependencyKey) bool { return strings.HasPrefix(k.Name, name+".") }) {
			err = parseDependencyObject(p, name, m[name], path+"."+name)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// DependencyNames returns the names of the dependency keys and objects,
// for the environment variables' mapping.
func DependencyNames() []string {
	names := []string{DependenciesKey}
	for _, k := range DependencyKeys {
		o, leaf, _ := strings.Cut(k.Name, ".")
		for _, n := range []string{o, leaf} {
			if n != "" && !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	return names
}
