package operations

import (
	"fmt"
	"reflect"
	"regexp"
	"strings"

	"github.com/go-playground/validator/v10"
)

// AddRule registers a custom constraint rule on r under name. The validate
// tags of operations registered on r afterwards may use it ("name" or
// "name=param"). check receives the field's value, pointers dereferenced,
// and the rule's parameter. It reports whether the value passes. It must
// be safe for concurrent use and must not block. A check that panics fails
// the value. doc describes the rule for people, as a phrase ("an even
// number"). It is the failure's message and the field's help text on the
// CLI, in the gRPC schema and in the OpenAPI schema (x-sundial-rules).
//
// The rule is enforced on every protocol, by the same check as the
// built-in rules. AddRule returns an error when name is not a lower-case
// identifier (letters, digits, '_'), or names a built-in or earlier rule.
// It also fails when check is nil or doc empty. Add rules before
// registering the operations that use them: Register refuses a tag naming
// an unknown rule. Rules are per registry.
func (r *Registry) AddRule(name, doc string, check func(value reflect.Value, param string) bool) error {
	if r == nil {
		return fmt.Errorf("operations: AddRule %q: nil registry", name)
	}
	if !ruleName(name) {
		return fmt.Errorf("operations: AddRule %q: a rule name is lower-case letters, digits and '_', starting with a letter", name)
	}
	if check == nil || doc == "" {
		return fmt.Errorf("operations: AddRule %q: the check function and the description are required", name)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.rules == nil {
		r.rules = newRuleSet()
	}
	if _, dup := r.rules.custom[name]; dup || builtinRule(r.rules.v, name) {
		return fmt.Errorf("operations: AddRule %q: the rule is defined already", name)
	}
	if err := r.rules.v.RegisterValidation(name, func(fl validator.FieldLevel) (ok bool) {
		defer func() {
			if recover() != nil {
				ok = false // a check that panics fails the value; the process stays up
			}
		}()
		return check(fl.Field(), fl.Param())
	}); err != nil {
		return fmt.Errorf("operations: AddRule %q: %w", name, err)
	}
	r.rules.custom[name] = doc
	return nil
}

// ruleSet returns the rules of the operations registered on r.
func (r *Registry) ruleSet() *ruleSet {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.rules == nil {
		return defaultRules
	}
	return r.rules
}

func ruleName(s string) bool {
	if s == "" || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' {
			return false
		}
	}
	return true
}

// builtinRule reports whether v knows rule name already: the validator
// panics with "Undefined validation function" on a tag naming an unknown
// rule (and may panic otherwise on a known rule without its parameter).
func builtinRule(v *validator.Validate, name string) (known bool) {
	defer func() {
		if r := recover(); r != nil {
			known = !strings.Contains(fmt.Sprint(r), "Undefined validation function")
		}
	}()
	_ = v.Var("", name)
	return true
}

// Rule is one rule of a field's validate tag, parsed for publishing: the
// OpenAPI document, the gRPC schema's comments and the CLI's help. Name is
// the rule ("min", "oneof", a custom rule's name). A "|" alternative is
// kept whole ("email|uuid"). Param is its parameter ("1", "EUR USD"). Elem
// says it applies to each element of a slice or map (it follows "dive").
// Doc describes a custom rule (AddRule); it is "" for a built-in one.
type Rule struct {
	Name  string
	Param string
	Elem  bool
	Doc   string
	kind  reflect.Kind // of the value the rule checks
}

// Rules are the rules of one field, in tag order.
type Rules []Rule

// Values returns the values of a oneof rule, or nil for another rule:
// what a CLI completes and an enum lists. A quoted value ('New York')
// loses its quotes, as the validator reads it.
func (r Rule) Values() []string {
	if r.Name != "oneof" {
		return nil
	}
	return oneofValues(r.Param)
}

// String describes the rules for people, in the words of the failures'
// messages: "required; at least 1 and at most 100 characters; one of EUR
// USD". It is "" when there are none.
func (rs Rules) String() string {
	var parts []string
	for _, r := range rs {
		if s := r.String(); s != "" {
			parts = append(parts, s)
		}
	}
	return strings.Join(parts, "; ")
}

// String describes one rule for people ("at most 100 characters", "each
// element: one of EUR USD").
func (r Rule) String() string {
	s := r.describe()
	if r.Elem && s != "" {
		s = "each element: " + s
	}
	return s
}

func (r Rule) describe() string {
	unit := ""
	if isLength(r.kind) {
		unit = " characters"
		if r.kind != reflect.String {
			unit = " elements"
		}
	}
	p := r.Param
	if p == "1" {
		unit = strings.TrimSuffix(unit, "s")
	}
	switch r.Name {
	case "omitempty", "dive":
		return ""
	case "required":
		return "required"
	case "min", "gte":
		return "at least " + p + unit
	case "max", "lte":
		return "at most " + p + unit
	case "gt":
		return "more than " + p + unit
	case "lt":
		return "less than " + p + unit
	case "len":
		if unit == "" {
			return "exactly " + p
		}
		return "exactly " + p + unit
	case "oneof":
		return "one of " + p
	case "pattern":
		return "matches " + p
	case "email", "uri", "url", "uuid", "uuid4":
		return "a valid " + r.Name
	}
	if r.Doc != "" {
		return r.Name + ": " + r.Doc
	}
	if p != "" {
		return r.Name + "=" + p
	}
	return r.Name
}

// FieldRules returns the rules of the validate tag of field f of an input
// of d, with the descriptions of d's custom rules, and whether f must be
// given: its zero value (what a missing field decodes to) fails them. A
// field without a tag has no rules; a struct field without a tag must be
// given when its own fields' zero values fail.
func (d *Descriptor) FieldRules(f reflect.StructField) (rules Rules, mustGive bool) {
	rs := d.ruleSet()
	tag := f.Tag.Get("validate")
	if tag == "-" {
		return nil, false
	}
	kind := f.Type.Kind()
	if kind == reflect.Pointer {
		kind = f.Type.Elem().Kind()
	}
	elemKind := reflect.Invalid
	if kind == reflect.Slice || kind == reflect.Array || kind == reflect.Map {
		et := f.Type
		if et.Kind() == reflect.Pointer {
			et = et.Elem()
		}
		elemKind = et.Elem().Kind()
		if elemKind == reflect.Pointer {
			elemKind = et.Elem().Elem().Kind()
		}
	}
	elem := false
	for part := range strings.SplitSeq(tag, ",") {
		if part == "" {
			continue
		}
		name, param, _ := strings.Cut(part, "=")
		if strings.Contains(part, "|") {
			name, param = part, ""
		}
		r := Rule{Name: name, Param: param, Elem: elem, Doc: rs.custom[name], kind: kind}
		if elem {
			r.kind = elemKind
		}
		if name == "dive" {
			elem = true
			continue
		}
		rules = append(rules, r)
	}
	return rules, zeroFails(rs.v, f.Type, tag)
}

// zeroFails reports whether the zero value of a field of type t fails its
// tag (a struct field: its own fields' tags too).
func zeroFails(v *validator.Validate, t reflect.Type, tag string) (fails bool) {
	defer func() {
		if recover() != nil {
			fails = false
		}
	}()
	if tag != "" && v.Var(reflect.Zero(t).Interface(), tag) != nil {
		return true
	}
	if t.Kind() == reflect.Struct && hasConstraints(t) && !strings.Contains(tag, "omitempty") {
		return v.Struct(reflect.New(t).Interface()) != nil
	}
	return false
}

// oneofValues splits a oneof parameter as the validator does (its
// parseOneOfParam2): words, or runs in single quotes, which may hold
// spaces; the quotes are dropped.
func oneofValues(param string) []string {
	vals := oneofSplit.FindAllString(param, -1)
	for i, v := range vals {
		vals[i] = strings.ReplaceAll(v, "'", "")
	}
	return vals
}

var oneofSplit = regexp.MustCompile(`'[^']*'|\S+`)
