package kernel

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/resilience"
)

// patch is a policy as written in JSON: nil fields inherit.
type patch struct {
	PermitLimit, QueueLimit, ConcurrencyLimit, ConcurrencyQueueLimit, FailureThreshold *int
	Window, BreakDuration, Timeout                                                     *time.Duration
}

func (p *patch) over(base patch) patch {
	out := base
	if p.PermitLimit != nil {
		out.PermitLimit = p.PermitLimit
	}
	if p.QueueLimit != nil {
		out.QueueLimit = p.QueueLimit
	}
	if p.ConcurrencyLimit != nil {
		out.ConcurrencyLimit = p.ConcurrencyLimit
	}
	if p.ConcurrencyQueueLimit != nil {
		out.ConcurrencyQueueLimit = p.ConcurrencyQueueLimit
	}
	if p.FailureThreshold != nil {
		out.FailureThreshold = p.FailureThreshold
	}
	if p.Window != nil {
		out.Window = p.Window
	}
	if p.BreakDuration != nil {
		out.BreakDuration = p.BreakDuration
	}
	if p.Timeout != nil {
		out.Timeout = p.Timeout
	}
	return out
}

func (p patch) policy() resilience.Policy {
	pol := resilience.Policy{Window: resilience.DefaultWindow, BreakDuration: resilience.DefaultBreakDuration}
	set := func(dst *int, src *int) {
		if src != nil {
			*dst = *src
		}
	}
	set(&pol.PermitLimit, p.PermitLimit)
	set(&pol.QueueLimit, p.QueueLimit)
	set(&pol.ConcurrencyLimit, p.ConcurrencyLimit)
	set(&pol.ConcurrencyQueueLimit, p.ConcurrencyQueueLimit)
	set(&pol.FailureThreshold, p.FailureThreshold)
	if p.Window != nil {
		pol.Window = *p.Window
	}
	if p.BreakDuration != nil {
		pol.BreakDuration = *p.BreakDuration
	}
	if p.Timeout != nil {
		pol.Timeout = *p.Timeout
	}
	return pol
}

// policies is the parsed section Sundial.Kernel.Resilience: defaults for
// every operation, and per-operation overrides that replace defaults key by
// key. Its zero value configures nothing.
type policies struct {
	defaults   patch
	operations map[string]patch
}

// policyFor returns the merged policy of the operation id: its overrides,
// then the section's defaults for the keys it does not set, then the
// built-in defaults.
func (o policies) policyFor(id string) resilience.Policy {
	if p, ok := o.operations[id]; ok {
		return p.over(o.defaults).policy()
	}
	return o.defaults.policy()
}

// operationIDs returns the IDs that have overrides, sorted.
func (o policies) operationIDs() []string {
	return slices.Sorted(maps.Keys(o.operations))
}

// Keys of the Resilience section, as written in JSON.
var policyKeys = []string{
	"PermitLimit", "WindowSeconds", "QueueLimit", "ConcurrencyLimit",
	"ConcurrencyQueueLimit", "FailureThreshold", "BreakSeconds", "TimeoutSeconds",
}

// parsePolicies parses the Resilience section. raw is the section as decoded
// from JSON (a map[string]any; nil means an empty section) and path is its
// key path for error messages, e.g. "Sundial.Kernel.Resilience".
//
// Keys and their JSON types:
//
//	PermitLimit            integer > 0    calls per window (default: unlimited)
//	WindowSeconds          number  > 0    window length (default 1)
//	QueueLimit             integer >= 0   calls waiting for the next window (default 0)
//	ConcurrencyLimit       integer > 0    calls executing at once (default: unlimited)
//	ConcurrencyQueueLimit  integer >= 0   calls waiting for a slot (default 0)
//	FailureThreshold       integer > 0    consecutive failures opening the breaker (default: none)
//	BreakSeconds           number  > 0    how long the breaker stays open (default 30)
//	TimeoutSeconds         number  > 0    default deadline and cap (default: none)
//	Operations             object         operation ID -> object of the keys above
//
// Every error names the full key path: an unknown key (a typo must not
// silently disable a limit), a value of the wrong type, a non-positive
// limit or window, a negative queue, or a malformed operation ID under
// Operations.
func parsePolicies(raw any, path string) (policies, error) {
	var o policies
	if raw == nil {
		return o, nil
	}
	m, ok := raw.(map[string]any)
	if !ok {
		return o, fmt.Errorf("kernel: %s: want an object, got %s", path, jsonType(raw))
	}
	var err error
	for _, k := range slices.Sorted(maps.Keys(m)) {
		v := m[k]
		if k == "Operations" {
			if err = o.parseOperations(v, path+".Operations"); err != nil {
				return policies{}, err
			}
			continue
		}
		if err = setKey(&o.defaults, k, v, path+"."+k); err != nil {
			return policies{}, err
		}
	}
	return o, nil
}

func (o *policies) parseOperations(raw any, path string) error {
	if raw == nil {
		return nil
	}
	ops, ok := raw.(map[string]any)
	if !ok {
		return fmt.Errorf("kernel: %s: want an object of operation IDs, got %s", path, jsonType(raw))
	}
	o.operations = make(map[string]patch, len(ops))
	for _, id := range slices.Sorted(maps.Keys(ops)) {
		if err := operations.ValidateID(id); err != nil {
			return fmt.Errorf("kernel: %s.%s: %w", path, id, err)
		}
		keys, ok := ops[id].(map[string]any)
		if !ok {
			return fmt.Errorf("kernel: %s.%s: want an object, got %s", path, id, jsonType(ops[id]))
		}
		var p patch
		for _, k := range slices.Sorted(maps.Keys(keys)) {
			if k == "Operations" {
				return fmt.Errorf("kernel: %s.%s.%s: Operations is only valid at the section's root", path, id, k)
			}
			if err := setKey(&p, k, keys[k], path+"."+id+"."+k); err != nil {
				return err
			}
		}
		o.operations[id] = p
	}
	return nil
}

func setKey(p *patch, key string, v any, path string) error {
	switch key {
	case "PermitLimit":
		return intKey(&p.PermitLimit, v, path, 1)
	case "QueueLimit":
		return intKey(&p.QueueLimit, v, path, 0)
	case "ConcurrencyLimit":
		return intKey(&p.ConcurrencyLimit, v, path, 1)
	case "ConcurrencyQueueLimit":
		return intKey(&p.ConcurrencyQueueLimit, v, path, 0)
	case "FailureThreshold":
		return intKey(&p.FailureThreshold, v, path, 1)
	case "WindowSeconds":
		return secondsKey(&p.Window, v, path)
	case "BreakSeconds":
		return secondsKey(&p.BreakDuration, v, path)
	case "TimeoutSeconds":
		return secondsKey(&p.Timeout, v, path)
	}
	for _, known := range policyKeys {
		if strings.EqualFold(known, key) {
			return fmt.Errorf("kernel: %s: unknown key; did you mean %q? (keys are case-sensitive)", path, known)
		}
	}
	return fmt.Errorf("kernel: %s: unknown key (known keys: %s, Operations)", path, strings.Join(policyKeys, ", "))
}

// maxInt bounds integer keys so that conversions never overflow, even
// where int is 32 bits wide.
const maxInt = math.MaxInt32

func intKey(dst **int, v any, path string, minimum int) error {
	f, ok := number(v)
	if !ok {
		return fmt.Errorf("kernel: %s: want an integer, got %s", path, jsonType(v))
	}
	if f != math.Trunc(f) || math.IsInf(f, 0) || math.IsNaN(f) {
		return fmt.Errorf("kernel: %s: want an integer, got %v", path, f)
	}
	if f < float64(minimum) {
		if minimum > 0 {
			return fmt.Errorf("kernel: %s: must be greater than 0, got %v", path, f)
		}
		return fmt.Errorf("kernel: %s: must not be negative, got %v", path, f)
	}
	if f > maxInt {
		return fmt.Errorf("kernel: %s: %v is too large (at most %d)", path, f, maxInt)
	}
	n := int(f)
	*dst = &n
	return nil
}

// maxSeconds bounds second-valued keys (about 31 years) so that conversion
// to time.Duration never overflows.
const maxSeconds = 1e9

func secondsKey(dst **time.Duration, v any, path string) error {
	f, ok := number(v)
	if !ok {
		return fmt.Errorf("kernel: %s: want a number of seconds, got %s", path, jsonType(v))
	}
	if math.IsNaN(f) || f <= 0 {
		return fmt.Errorf("kernel: %s: must be greater than 0, got %v", path, f)
	}
	if f > maxSeconds {
		return fmt.Errorf("kernel: %s: %v seconds is too large (at most %g)", path, f, float64(maxSeconds))
	}
	d := time.Duration(f * float64(time.Second))
	if d <= 0 {
		return fmt.Errorf("kernel: %s: %v seconds is shorter than a nanosecond", path, f)
	}
	*dst = &d
	return nil
}

func number(v any) (float64, bool) {
	switch n := v.(type) {
	case float64:
		return n, true
	case float32:
		return float64(n), true
	case int:
		return float64(n), true
	case int64:
		return float64(n), true
	case int32:
		return float64(n), true
	case uint64:
		return float64(n), true
	}
	return 0, false
}

func jsonType(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case string:
		return "a string"
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	}
	if _, ok := number(v); ok {
		return "a number"
	}
	return fmt.Sprintf("%T", v)
}
