package config

import (
	"encoding/json"
	"fmt"
	"math"
	"time"

	classes "github.com/sundial-go/sundial/kernel/internal/priority"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience"
)

// Duration is time.Duration, short for the table's rows.
type Duration = time.Duration

// value is the typed behaviour of a key: how its JSON value is parsed,
// and where in a Target it goes.
type value interface {
	// parse validates a JSON value; path names the key in the error.
	parse(v any, path string) (any, error)
	// apply writes a parsed value to t (nil: the key's built-in default).
	apply(t *Target, v any)
	// equal reports whether a and b hold the same value of the key.
	equal(a, b *Target) bool
}

// field is a value of type T kept at one field of a Target.
type field[T comparable] struct {
	read func(v any, path string) (T, error)
	at   func(*Target) *T
	def  T
}

func (f field[T]) parse(v any, path string) (any, error) { return f.read(v, path) }

func (f field[T]) apply(t *Target, v any) {
	if v == nil {
		*f.at(t) = f.def
		return
	}
	*f.at(t) = v.(T)
}

func (f field[T]) equal(a, b *Target) bool { return *f.at(a) == *f.at(b) }

// use is a key read by read into the field at returns; unset, the field
// keeps its zero value.
func use[T comparable](read func(any, string) (T, error), at func(*Target) *T) value {
	return field[T]{read: read, at: at}
}

// withDefault is use with a built-in default for an unset key.
func withDefault[T comparable](read func(any, string) (T, error), at func(*Target) *T, def T) value {
	return field[T]{read: read, at: at, def: def}
}

// MaxInt bounds integer keys so that conversions never overflow, even
// where int is 32 bits wide.
const MaxInt = math.MaxInt32

// maxSeconds bounds second-valued keys (about 31 years) so that conversion
// to time.Duration never overflows.
const maxSeconds = 1e9

// maxOutcomeBytes bounds Idempotency.MaxOutcomeBytes (1 MiB).
const maxOutcomeBytes = 1 << 20

// maxDegradeAfter bounds DegradeAfter: after each failure a store check
// runs at once, up to DegradeAfter of them, so a larger count would
// keep a failing store busy with checks.
const maxDegradeAfter = 100

// integer reads an integer of at least minimum (0 or 1).
func integer(minimum int) func(any, string) (int, error) {
	return func(v any, path string) (int, error) {
		f, ok := Number(v)
		if !ok {
			return 0, fmt.Errorf("kernel: %s: want an integer, got %s", path, JSONType(v))
		}
		if f != math.Trunc(f) || math.IsInf(f, 0) || math.IsNaN(f) {
			return 0, fmt.Errorf("kernel: %s: want an integer, got %v", path, f)
		}
		if f < float64(minimum) {
			if minimum > 0 {
				return 0, fmt.Errorf("kernel: %s: must be greater than 0, got %v", path, f)
			}
			return 0, fmt.Errorf("kernel: %s: must not be negative, got %v", path, f)
		}
		if f > MaxInt {
			return 0, fmt.Errorf("kernel: %s: %v is too large (at most %d)", path, f, MaxInt)
		}
		return int(f), nil
	}
}

// concurrencyLimit reads a ConcurrencyLimit: a positive integer, or
// "adaptive" (resilience.AdaptiveLimit).
func concurrencyLimit(v any, path string) (int, error) {
	if s, ok := v.(string); ok {
		if s == "adaptive" {
			return resilience.AdaptiveLimit, nil
		}
		return 0, fmt.Errorf("kernel: %s: want a positive integer or \"adaptive\", got %q", path, s)
	}
	return integer(1)(v, path)
}

// duration reads a positive number of seconds.
func duration(v any, path string) (Duration, error) {
	f, ok := Number(v)
	if !ok {
		return 0, fmt.Errorf("kernel: %s: want a number of seconds, got %s", path, JSONType(v))
	}
	if math.IsNaN(f) || f <= 0 {
		return 0, fmt.Errorf("kernel: %s: must be greater than 0, got %v", path, f)
	}
	if f > maxSeconds {
		return 0, fmt.Errorf("kernel: %s: %v seconds is too large (at most %g)", path, f, float64(maxSeconds))
	}
	d := Duration(f * float64(time.Second))
	if d <= 0 {
		return 0, fmt.Errorf("kernel: %s: %v seconds is shorter than a nanosecond", path, f)
	}
	return d, nil
}

// milliseconds reads a store timeout: more than 0, at most 60000.
func milliseconds(v any, path string) (Duration, error) {
	f, ok := Number(v)
	if !ok {
		return 0, fmt.Errorf("kernel: %s: want a number of milliseconds, got %s", path, JSONType(v))
	}
	if math.IsNaN(f) || f <= 0 || f > 60000 {
		return 0, fmt.Errorf("kernel: %s: must be greater than 0 and at most 60000, got %v", path, f)
	}
	// Below a microsecond the duration would be 0, which means the
	// default: refuse it rather than silently take the default.
	if f < 0.001 {
		return 0, fmt.Errorf("kernel: %s: must be at least 0.001 (1 µs), got %v", path, f)
	}
	return Duration(f * float64(time.Millisecond)), nil
}

func boolean(v any, path string) (bool, error) {
	b, ok := v.(bool)
	if !ok {
		return false, fmt.Errorf("kernel: %s: want a boolean, got %s", path, JSONType(v))
	}
	return b, nil
}

func scope(v any, path string) (resilience.Scope, error) {
	str, ok := v.(string)
	if sc := resilience.Scope(str); ok && (sc == resilience.ScopeProcess || sc == resilience.ScopeCluster) {
		return sc, nil
	}
	return "", fmt.Errorf("kernel: %s: want \"process\" or \"cluster\", got %s", path, describe(v))
}

// priority reads an operation's class.
func priority(v any, path string) (pipeline.Priority, error) {
	str, ok := v.(string)
	if p, valid := classes.Parse(str); ok && valid && str == p.String() {
		return p, nil
	}
	return 0, fmt.Errorf("kernel: %s: want \"critical\", \"default\" or \"sheddable\", got %s", path, describe(v))
}

// rate reads a MessagesPerSecond: more than 0, at most 1e9.
func rate(v any, path string) (float64, error) {
	f, ok := Number(v)
	if !ok {
		return 0, fmt.Errorf("kernel: %s: want a number of messages a second, got %s", path, JSONType(v))
	}
	if !(f > 0 && f <= 1e9) {
		return 0, fmt.Errorf("kernel: %s: must be greater than 0 and at most 1e9, got %v", path, f)
	}
	return f, nil
}

// fraction reads a PriorityReserve: 0 to 0.999.
func fraction(v any, path string) (float64, error) {
	f, ok := Number(v)
	if !ok {
		return 0, fmt.Errorf("kernel: %s: want a number from 0 to 0.999, got %s", path, JSONType(v))
	}
	if !(f >= 0 && f <= 0.999) {
		return 0, fmt.Errorf("kernel: %s: must be from 0 to 0.999, got %v", path, f)
	}
	return f, nil
}

func onStoreError(v any, path string) (string, error) {
	switch str, _ := v.(string); str {
	case "local", "open", "closed":
		return str, nil
	}
	return "", fmt.Errorf("kernel: %s: want \"local\", \"open\" or \"closed\", got %s", path, describe(v))
}

// baggageMember reads the name of a baggage member: 1 to 64 letters,
// digits, '-', '_' or '.'.
func baggageMember(v any, path string) (string, error) {
	str, ok := v.(string)
	valid := ok && str != "" && len(str) <= 64
	for i := 0; valid && i < len(str); i++ {
		c := str[i]
		valid = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.'
	}
	if !valid {
		return "", fmt.Errorf("kernel: %s: want a baggage member name of 1 to 64 letters, digits, '-', '_' or '.', got %s", path, describe(v))
	}
	return str, nil
}

// limitKinds reads a Limits object (kind -> configuration object) into
// canonical JSON. Whether each kind is registered is the kernel's check.
func limitKinds(v any, path string) (string, error) {
	m, ok := v.(map[string]any)
	if !ok || len(m) == 0 || len(m) > MaxCustomLimits {
		return "", fmt.Errorf("kernel: %s: want an object of 1 to %d limit kinds, got %s", path, MaxCustomLimits, describeSize(v))
	}
	for kind, c := range m {
		if _, ok := c.(map[string]any); !ok {
			return "", fmt.Errorf("kernel: %s.%s: want an object (the limit's configuration), got %s", path, kind, JSONType(c))
		}
	}
	b, err := json.Marshal(m)
	if err != nil {
		return "", fmt.Errorf("kernel: %s: %w", path, err)
	}
	return string(b), nil
}

// describeSize is JSONType, with the size of an object.
func describeSize(v any) string {
	if m, ok := v.(map[string]any); ok {
		return fmt.Sprintf("an object of %d", len(m))
	}
	return JSONType(v)
}

// Number returns a JSON number (as decoded, or as an environment value)
// as a float64.
func Number(v any) (float64, bool) {
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

// JSONType names the JSON type of a decoded value, for error messages.
func JSONType(v any) string {
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
	if _, ok := Number(v); ok {
		return "a number"
	}
	return fmt.Sprintf("%T", v)
}

// describe renders a config value for an error message: strings quoted,
// other values by their JSON type.
func describe(v any) string {
	if s, ok := v.(string); ok {
		return fmt.Sprintf("%q", s)
	}
	return JSONType(v)
}
