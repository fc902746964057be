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
	"github.com/sundial-go/sundial/resilience/idempotency"
)

// patch is a policy as written in JSON: nil fields inherit.
type patch struct {
	PermitLimit, QueueLimit, ConcurrencyLimit, ConcurrencyQueueLimit, FailureThreshold *int
	Window, BreakDuration, Timeout                                                     *time.Duration
	cluster                                                                            clusterPatch
	idem                                                                               *idempotency.Policy
}

// clusterPatch holds the keys of cluster-scoped limits (docs/cluster.md).
type clusterPatch struct {
	Scope            *resilience.Scope
	StoreTimeout     *time.Duration
	OnStoreError     *string
	ExpectedReplicas *int
	RateLimitHeaders *bool
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
	if p.idem != nil {
		out.idem = p.idem
	}
	c := &out.cluster
	if p.cluster.Scope != nil {
		c.Scope = p.cluster.Scope
	}
	if p.cluster.StoreTimeout != nil {
		c.StoreTimeout = p.cluster.StoreTimeout
	}
	if p.cluster.OnStoreError != nil {
		c.OnStoreError = p.cluster.OnStoreError
	}
	if p.cluster.ExpectedReplicas != nil {
		c.ExpectedReplicas = p.cluster.ExpectedReplicas
	}
	if p.cluster.RateLimitHeaders != nil {
		c.RateLimitHeaders = p.cluster.RateLimitHeaders
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
	if c := p.cluster; c.Scope != nil {
		pol.Scope = *c.Scope
	}
	if c := p.cluster; c.StoreTimeout != nil {
		pol.StoreTimeout = *c.StoreTimeout
	}
	if c := p.cluster; c.OnStoreError != nil {
		pol.OnStoreError = *c.OnStoreError
	}
	set(&pol.ExpectedReplicas, p.cluster.ExpectedReplicas)
	if c := p.cluster; c.RateLimitHeaders != nil {
		pol.RateLimitHeaders = *c.RateLimitHeaders
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

// idempotencyFor returns the merged idempotency policy of the operation id
// (the operation's Idempotency object replaces the section default's whole).
func (o policies) idempotencyFor(id string) idempotency.Policy {
	p := o.defaults
	if op, ok := o.operations[id]; ok {
		p = op.over(o.defaults)
	}
	if p.idem == nil {
		return idempotency.Policy{}
	}
	return *p.idem
}

// operationIDs returns the IDs that have overrides, sorted.
func (o policies) operationIDs() []string {
	return slices.Sorted(maps.Keys(o.operations))
}

// Keys of the Resilience section, as written in JSON.
var policyKeys = []string{
	"PermitLimit", "WindowSeconds", "QueueLimit", "ConcurrencyLimit",
	"ConcurrencyQueueLimit", "FailureThreshold", "BreakSeconds", "TimeoutSeconds",
	"Scope", "StoreTimeoutMs", "OnStoreError", "ExpectedReplicas", "RateLimitHeaders",
	"Idempotency",
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
//	Scope                  string         "process" (default) or "cluster" (docs/cluster.md)
//	StoreTimeoutMs         number  > 0    bound of each store call, at most 60000 (default 50)
//	OnStoreError           string         "local" (default), "open" or "closed"
//	ExpectedReplicas       integer > 0    replicas the "local" share divides by (default: live count)
//	RateLimitHeaders       boolean        publish RateLimit-Policy / RateLimit (default false)
//	Idempotency            object         idempotency keys (docs/idempotency.md): Enabled (boolean,
//	                                      default true), Required (boolean, default false),
//	                                      RetentionSeconds (number > 0, default 86400),
//	                                      MaxOutcomeBytes (integer > 0, at most 1048576, default 65536)
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
	case "Scope", "StoreTimeoutMs", "OnStoreError", "ExpectedReplicas", "RateLimitHeaders":
		return setClusterKey(&p.cluster, key, v, path)
	case "Idempotency":
		return idempotencyKey(&p.idem, v, path)
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

func setClusterKey(c *clusterPatch, key string, v any, path string) error {
	switch key {
	case "Scope":
		str, ok := v.(string)
		if sc := resilience.Scope(str); !ok || sc == "" || !sc.Valid() {
			return fmt.Errorf("kernel: %s: want \"process\" or \"cluster\", got %s", path, describe(v))
		} else {
			c.Scope = &sc
		}
	case "OnStoreError":
		str, ok := v.(string)
		switch str {
		case "local", "open", "closed":
		default:
			ok = false
		}
		if !ok {
			return fmt.Errorf("kernel: %s: want \"local\", \"open\" or \"closed\", got %s", path, describe(v))
		}
		c.OnStoreError = &str
	case "StoreTimeoutMs":
		f, ok := number(v)
		if !ok {
			return fmt.Errorf("kernel: %s: want a number of milliseconds, got %s", path, jsonType(v))
		}
		// Below a microsecond the duration would be 0, which means the
		// default: refuse it rather than silently take 50 ms.
		if math.IsNaN(f) || f <= 0 || f > 60000 {
			return fmt.Errorf("kernel: %s: must be greater than 0 and at most 60000, got %v", path, f)
		}
		if f < 0.001 {
			return fmt.Errorf("kernel: %s: must be at least 0.001 (1 µs), got %v", path, f)
		}
		d := time.Duration(f * float64(time.Millisecond))
		c.StoreTimeout = &d
	case "ExpectedReplicas":
		return intKey(&c.ExpectedReplicas, v, path, 1)
	case "RateLimitHeaders":
		b, ok := v.(bool)
		if !ok {
			return fmt.Errorf("kernel: %s: want a boolean, got %s", path, jsonType(v))
		}
		c.RateLimitHeaders = &b
	}
	return nil
}

// describe renders a config value for an error message: strings quoted,
// other values by their JSON type.
func describe(v any) string {
	if s, ok := v.(string); ok {
		return fmt.Sprintf("%q", s)
	}
	return jsonType(v)
}

var idempotencyKeys = []string{"Enabled", "Required", "RetentionSeconds", "MaxOutcomeBytes"}

// maxOutcomeBytes bounds Idempotency.MaxOutcomeBytes (1 MiB).
const maxOutcomeBytes = 1 << 20

// idempotencyKey parses an Idempotency object (docs/idempotency.md).
func idempotencyKey(dst **idempotency.Policy, v any, path string) error {
	m, ok := v.(map[string]any)
	if !ok {
		return fmt.Errorf("kernel: %s: want an object (keys: %s), got %s", path, strings.Join(idempotencyKeys, ", "), jsonType(v))
	}
	pol := idempotency.Policy{Enabled: true}
	boolean := func(dst *bool, v any, p string) error {
		b, ok := v.(bool)
		if !ok {
			return fmt.Errorf("kernel: %s: want a boolean, got %s", p, jsonType(v))
		}
		*dst = b
		return nil
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		p := path + "." + k
		var err error
		switch k {
		case "Enabled":
			err = boolean(&pol.Enabled, m[k], p)
		case "Required":
			err = boolean(&pol.Required, m[k], p)
		case "RetentionSeconds":
			var d *time.Duration
			if err = secondsKey(&d, m[k], p); err == nil {
				pol.Retention = *d
			}
		case "MaxOutcomeBytes":
			var n *int
			if err = intKey(&n, m[k], p, 1); err == nil {
				if *n > maxOutcomeBytes {
					err = fmt.Errorf("kernel: %s: %d is too large (at most %d)", p, *n, maxOutcomeBytes)
				} else {
					pol.MaxOutcomeBytes = *n
				}
			}
		default:
			err = fmt.Errorf("kernel: %s: unknown key (known keys: %s)", p, strings.Join(idempotencyKeys, ", "))
		}
		if err != nil {
			return err
		}
	}
	*dst = &pol
	return nil
}
