package operations

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"sync"

	"github.com/go-playground/validator/v10"

	"github.com/sundial-go/sundial/pipeline"
)

// Constraints on input values are declared once, in `validate:"..."` struct
// tags. github.com/go-playground/validator/v10 checks them. Its tag grammar
// (required, min, max, len, oneof, email, uri, uuid, dive, ...) is the Go
// web ecosystem's convention. It caches each struct's parsed tags and
// reports every failing field at once. Sundial adds one rule,
// pattern=<regexp>; the regexp may not hold ',' or '|'. Fields are named by
// their JSON names. These are also their gRPC field names and, in
// kebab-case, their CLI flags.

// Violation is one failing field of a CONSTRAINT outcome. Field is its
// path in JSON names ("lines[1].sku"). Rule is the tag rule that failed
// ("min") and Param its parameter ("1"). Message is a sentence for people.
type Violation struct {
	Field   string `json:"field"`
	Rule    string `json:"rule"`
	Param   string `json:"param,omitempty"`
	Message string `json:"message"`
}

// DetailViolations is the details key of a CodeConstraint outcome: a
// []Violation, one per failing field. Every JSON form of the outcome
// carries it in the same place, details.errors, with Violation's members.
const DetailViolations = "errors"

// Violations returns the failing fields of a CodeConstraint outcome, or
// nil when err has none.
func Violations(err error) []Violation {
	pe, ok := errors.AsType[*pipeline.Error](err)
	if !ok || pe == nil {
		return nil
	}
	v, _ := pe.Details()[DetailViolations]
	vs, _ := v.([]Violation)
	return vs
}

var (
	defaultRules = newRuleSet()
	constrained  sync.Map // reflect.Type -> bool
	patternCache sync.Map // string -> *regexp.Regexp
)

// ruleSet is the validator of one registry and the descriptions of the
// custom rules registered on it (AddRule). The default set, shared by
// registries without custom rules, is never changed.
type ruleSet struct {
	v      *validator.Validate
	custom map[string]string // custom rule name -> description
	plans  planCache         // the fast path's compiled types
}

func newRuleSet() *ruleSet {
	return &ruleSet{v: newValidate(), custom: map[string]string{}}
}

func newValidate() *validator.Validate {
	v := validator.New(validator.WithRequiredStructEnabled())
	v.RegisterTagNameFunc(func(f reflect.StructField) string {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch name {
		case "-":
			return "-"
		case "":
			return f.Name
		}
		return name
	})
	if err := v.RegisterValidation("pattern", checkPattern); err != nil {
		panic(err) // a fixed, valid registration
	}
	return v
}

// checkPattern is the pattern=<regexp> rule on strings; each regexp is
// compiled once. A regexp that does not compile fails every value (and is
// refused at registration, see compileConstraints).
func checkPattern(fl validator.FieldLevel) bool {
	re, err := patternOf(fl.Param())
	if err != nil || fl.Field().Kind() != reflect.String {
		return false
	}
	return re.MatchString(fl.Field().String())
}

func patternOf(expr string) (*regexp.Regexp, error) {
	if re, ok := patternCache.Load(expr); ok {
		return re.(*regexp.Regexp), nil
	}
	re, err := regexp.Compile(expr)
	if err != nil {
		return nil, err
	}
	patternCache.Store(expr, re)
	return re, nil
}

// Constrained reports whether d's input type declares a constraint (a
// validate tag, at any depth). CheckConstraints passes every input of an
// operation that declares none, so a caller may skip it.
func (d *Descriptor) Constrained() bool {
	return d != nil && d.Input != nil && hasConstraints(d.Input)
}

// hasConstraints reports whether struct type t (or one it holds) has a
// validate tag; the answer is cached per type, so an input without
// constraints costs one map load per call.
func hasConstraints(t reflect.Type) bool {
	if v, ok := constrained.Load(t); ok {
		return v.(bool)
	}
	has := walkConstraints(t, map[reflect.Type]bool{})
	constrained.Store(t, has)
	return has
}

func walkConstraints(t reflect.Type, seen map[reflect.Type]bool) bool {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array || t.Kind() == reflect.Map {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || seen[t] {
		return false
	}
	seen[t] = true
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Tag.Get("validate") != "" || walkConstraints(f.Type, seen) {
			return true
		}
	}
	return false
}

// compileConstraints parses the constraints of input type t once, at
// registration: a malformed tag, an unknown rule or a pattern that does
// not compile is an error naming the field, not a panic on the first call.
func compileConstraints(rs *ruleSet, t reflect.Type) (err error) {
	if t == nil || !hasConstraints(t) {
		return nil
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	if err := checkPatterns(t, map[reflect.Type]bool{}); err != nil {
		return err
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("validate tag: %v", r)
		}
	}()
	_ = rs.v.Struct(reflect.New(t).Interface()) // parses and caches the tags
	return nil
}

// checkPatterns compiles each pattern= regexp of struct type t.
func checkPatterns(t reflect.Type, seen map[reflect.Type]bool) error {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array || t.Kind() == reflect.Map {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || seen[t] {
		return nil
	}
	seen[t] = true
	for i := range t.NumField() {
		f := t.Field(i)
		for rule := range strings.SplitSeq(f.Tag.Get("validate"), ",") {
			if expr, ok := strings.CutPrefix(rule, "pattern="); ok {
				if _, err := patternOf(expr); err != nil {
					return fmt.Errorf("field %s: pattern %q: %v", f.Name, expr, err)
				}
			}
		}
		if err := checkPatterns(f.Type, seen); err != nil {
			return err
		}
	}
	return nil
}

// CheckConstraints checks the validate tags of the decoded input in, a
// pointer to the input struct. It uses the rules of d's registry: the
// built-in ones and those added with AddRule. It returns nil, or one
// VALIDATION outcome, code CodeConstraint. The outcome lists every failing
// field under details.errors ([]Violation). Every adapter calls it right
// after decoding, before the invocation runs. So no limit permit is spent
// and the breaker does not count it. A nil or typed
// nil in, or an input without validate tags, passes. A Descriptor that
// Register did not make checks the built-in rules only.
func (d *Descriptor) CheckConstraints(in any) *pipeline.Error {
	if in == nil {
		return nil
	}
	rv := reflect.ValueOf(in)
	if !hasConstraints(rv.Type()) {
		return nil
	}
	for rv.Kind() == reflect.Pointer {
		if rv.IsNil() {
			return nil
		}
		rv = rv.Elem()
	}
	if rv.Kind() != reflect.Struct {
		return nil
	}
	if !rv.CanAddr() { // a struct value, not a pointer: check a copy
		p := reflect.New(rv.Type())
		p.Elem().Set(rv)
		rv = p.Elem()
	}
	rs := d.ruleSet()
	if rs.passes(rv) {
		return nil
	}
	err := rs.v.Struct(rv.Addr().Interface())
	if err == nil {
		return nil
	}
	errs, ok := err.(validator.ValidationErrors)
	if !ok {
		return pipeline.NewError(pipeline.KindValidation, CodeConstraint, "The input is invalid.")
	}
	vs := make([]Violation, 0, min(len(errs), maxViolations))
	for _, fe := range errs[:min(len(errs), maxViolations)] {
		vs = append(vs, rs.violationOf(fe))
	}
	msg := fmt.Sprintf("Field '%s': %s", vs[0].Field, vs[0].Message)
	switch {
	case len(errs) > len(vs):
		msg = fmt.Sprintf("%d fields are invalid: %s.. and %d more.", len(errs), fieldList(vs), len(errs)-len(vs))
	case len(vs) > 1:
		msg = fmt.Sprintf("%d fields are invalid: %s", len(vs), fieldList(vs))
	}
	return pipeline.NewError(pipeline.KindValidation, CodeConstraint, msg).WithDetail(DetailViolations, vs)
}

// maxViolations is how many failing fields an answer lists at most: a
// small input of many slice elements must not make a large answer (the
// message says how many more failed).
const maxViolations = 100

func fieldList(vs []Violation) string {
	names := make([]string, len(vs))
	for i, v := range vs {
		names[i] = "'" + v.Field + "'"
	}
	return strings.Join(names, ", ") + "."
}

// violationOf turns one validator failure into a Violation; its path
// drops the struct's own name ("OrderInput.lines[0].sku" is "lines[0].sku").
func (rs *ruleSet) violationOf(fe validator.FieldError) Violation {
	field := fe.Namespace()
	if _, rest, ok := strings.Cut(field, "."); ok {
		field = rest
	}
	msg := ruleMessage(fe)
	if doc, ok := rs.custom[fe.Tag()]; ok {
		msg = "must satisfy " + fe.Tag() + ": " + doc + "."
	}
	return Violation{Field: field, Rule: fe.Tag(), Param: fe.Param(), Message: msg}
}

// ruleMessage is a sentence for people describing the rule fe failed.
func ruleMessage(fe validator.FieldError) string {
	p := fe.Param()
	switch fe.Tag() {
	case "required":
		return "is required."
	case "min", "gte":
		if isLength(fe.Kind()) {
			return "must have at least " + p + " characters or elements."
		}
		return "must be at least " + p + "."
	case "max", "lte":
		if isLength(fe.Kind()) {
			return "must have at most " + p + " characters or elements."
		}
		return "must be at most " + p + "."
	case "gt":
		return "must be greater than " + p + "."
	case "lt":
		return "must be less than " + p + "."
	case "len":
		return "must have exactly " + p + " characters or elements."
	case "oneof":
		return "must be one of: " + p + "."
	case "pattern":
		return "must match " + p + "."
	case "email", "uri", "url", "uuid", "uuid4":
		return "must be a valid " + fe.Tag() + "."
	}
	if p != "" {
		return fmt.Sprintf("fails rule %s=%s.", fe.Tag(), p)
	}
	return "fails rule " + fe.Tag() + "."
}

func isLength(k reflect.Kind) bool {
	return k == reflect.String || k == reflect.Slice || k == reflect.Map || k == reflect.Array
}
