package operations

import (
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// The fast path. The validator parses each rule's parameter and boxes each
// field's value on every call (docs/validation.md gives the cost). So a
// type's tags are also compiled once into plain checks. This covers the
// rules whose semantics are simple and fixed: required, omitempty, min,
// max, gte, lte, gt, lt, len and oneof on strings, numbers and booleans.
// The checks mirror the validator's own code (baked_in.go: rune counts,
// ParseInt base 0, float32 parameters at 32 bits, oneof by canonical
// decimal). The fast path only ever accepts. A value it cannot decide, or
// that fails a check, goes to the validator. The validator stays the
// authority and words the failures. FuzzFastPathAgrees checks the two
// agree.

// fieldCheck is the compiled constraints of one field of a struct.
type fieldCheck struct {
	index     int
	omitempty bool // the zero value passes
	validator bool // rules the fast path does not know: ask the validator
	checks    []func(reflect.Value) bool
}

// fastPlan is the compiled constraints of one struct type.
type fastPlan struct {
	fields []fieldCheck
}

// planCache maps a ruleSet's struct types to their plans.
type planCache struct{ m sync.Map } // reflect.Type -> *fastPlan

// passes reports whether struct value rv certainly passes its
// constraints; false means "ask the validator".
func (rs *ruleSet) passes(rv reflect.Value) bool {
	var p *fastPlan
	if v, ok := rs.plans.m.Load(rv.Type()); ok {
		p = v.(*fastPlan)
	} else {
		p = compilePlan(rv.Type())
		rs.plans.m.Store(rv.Type(), p)
	}
	for i := range p.fields {
		fc := &p.fields[i]
		v := rv.Field(fc.index)
		if fc.omitempty && v.IsZero() {
			continue
		}
		if fc.validator {
			return false
		}
		for _, check := range fc.checks {
			if !check(v) {
				return false
			}
		}
	}
	return true
}

// compilePlan compiles the fields of struct type t.
func compilePlan(t reflect.Type) *fastPlan {
	p := &fastPlan{}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("validate")
		if tag == "-" || (!f.Anonymous && !f.IsExported()) {
			continue
		}
		if tag == "" {
			if hasConstraints(f.Type) {
				p.fields = append(p.fields, fieldCheck{index: i, validator: true}) // nested
			}
			continue
		}
		p.fields = append(p.fields, compileField(i, f.Type, tag))
	}
	return p
}

// compileField compiles the tag of the field at index i, of type ft.
func compileField(i int, ft reflect.Type, tag string) fieldCheck {
	fc := fieldCheck{index: i}
	rules := strings.Split(tag, ",")
	if rules[0] == "omitempty" {
		fc.omitempty, rules = true, rules[1:]
	}
	if !scalarKind(ft.Kind()) || ft == reflect.TypeFor[time.Duration]() {
		fc.validator, fc.omitempty = true, false // its zero is not "empty" the same way
		return fc
	}
	for _, r := range rules {
		name, param, _ := strings.Cut(r, "=")
		check := compileRule(ft.Kind(), name, param)
		if check == nil || strings.Contains(r, "|") {
			fc.validator = true
			return fc
		}
		fc.checks = append(fc.checks, check)
	}
	return fc
}

func scalarKind(k reflect.Kind) bool {
	switch k {
	case reflect.String, reflect.Bool,
		reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		return true
	}
	return false
}

// compileRule returns the check of one rule on a value of kind k, or nil
// when the fast path does not know it (the validator then decides).
func compileRule(k reflect.Kind, name, param string) func(reflect.Value) bool {
	if name == "required" {
		return func(v reflect.Value) bool { return !v.IsZero() }
	}
	if name == "oneof" {
		return compileOneOf(k, param)
	}
	op, ok := comparisons[name]
	if !ok {
		return nil
	}
	switch k {
	case reflect.String:
		p, err := strconv.ParseInt(param, 0, 64)
		if err != nil {
			return nil
		}
		return func(v reflect.Value) bool { return compare(op, int64(utf8.RuneCountInString(v.String())), p) }
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		p, err := strconv.ParseInt(param, 0, 64)
		if err != nil {
			return nil
		}
		return func(v reflect.Value) bool { return compare(op, v.Int(), p) }
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		p, err := strconv.ParseUint(param, 0, 64)
		if err != nil {
			return nil
		}
		return func(v reflect.Value) bool { return compare(op, v.Uint(), p) }
	case reflect.Float32, reflect.Float64:
		bits := 64
		if k == reflect.Float32 {
			bits = 32
		}
		p, err := strconv.ParseFloat(param, bits)
		if err != nil {
			return nil
		}
		return func(v reflect.Value) bool { return compare(op, v.Float(), p) }
	}
	return nil
}

// A comparison is a bound rule: the value (a string's rune count) against
// the parameter.
type comparison uint8

const (
	atLeast comparison = iota // min, gte
	atMost                    // max, lte
	above                     // gt
	below                     // lt
	equal                     // len
)

var comparisons = map[string]comparison{
	"min": atLeast, "gte": atLeast, "max": atMost, "lte": atMost, "gt": above, "lt": below, "len": equal,
}

func compare[T int64 | uint64 | float64](op comparison, n, p T) bool {
	switch op {
	case atLeast:
		return n >= p
	case atMost:
		return n <= p
	case above:
		return n > p
	case below:
		return n < p
	}
	return n == p
}

// compileOneOf compiles oneof on strings and integers; an integer matches
// a value that is its canonical decimal, as the validator compares
// strconv.FormatInt with each value.
func compileOneOf(k reflect.Kind, param string) func(reflect.Value) bool {
	vals := oneofValues(param)
	switch k {
	case reflect.String:
		set := make(map[string]bool, len(vals))
		for _, v := range vals {
			set[v] = true
		}
		return func(v reflect.Value) bool { return set[v.String()] }
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		set := map[int64]bool{}
		for _, v := range vals {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil && strconv.FormatInt(n, 10) == v {
				set[n] = true
			}
		}
		return func(v reflect.Value) bool { return set[v.Int()] }
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		set := map[uint64]bool{}
		for _, v := range vals {
			if n, err := strconv.ParseUint(v, 10, 64); err == nil && strconv.FormatUint(n, 10) == v {
				set[n] = true
			}
		}
		return func(v reflect.Value) bool { return set[v.Uint()] }
	}
	return nil
}
