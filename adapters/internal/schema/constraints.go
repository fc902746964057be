package schema

import (
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/sundial-go/sundial/operations"
)

// extensionRules is the OpenAPI extension that lists the rules of a
// field's validate tag JSON Schema cannot say (a custom rule registered
// with operations.Registry.AddRule, or a built-in one without a keyword):
// an array of {"rule", "param", "description"}.
const extensionRules = "x-sundial-rules"

// constrainer writes the validate tags of an operation's input into its
// generated JSON Schema. So a validator of the document answers as the
// server does.
//   - min, max, gte, lte, gt, lt and len become minLength/maxLength,
//     minItems/maxItems, minProperties/maxProperties or minimum/maximum,
//     and the exclusive bounds.
//   - oneof becomes an enum, and pattern a pattern.
//   - email, uri, url and uuid become a format.
//   - Rules after dive apply to items, or to a map's values.
//
// A field whose zero value fails its rules is required: a missing field
// decodes to it. An omitempty scalar accepts its zero value besides
// (anyOf). It copies each schema it changes, as a generator may share them.
type constrainer struct {
	d    *operations.Descriptor
	seen map[reflect.Type]bool
}

// constrain writes the constraints of Go type t into schema ref.
func constrain(d *operations.Descriptor, t reflect.Type, ref *openapi3.SchemaRef) *openapi3.SchemaRef {
	if ref == nil || ref.Value == nil {
		return ref
	}
	c := constrainer{d: d, seen: map[reflect.Type]bool{}}
	s := cloneSchema(ref.Value)
	c.object(t, s)
	return &openapi3.SchemaRef{Value: s}
}

func cloneSchema(s *openapi3.Schema) *openapi3.Schema {
	cp := *s
	if s.Properties != nil {
		cp.Properties = make(openapi3.Schemas, len(s.Properties))
		for k, v := range s.Properties {
			cp.Properties[k] = v
		}
	}
	cp.Required = append([]string(nil), s.Required...)
	return &cp
}

// object writes the constraints of the fields of struct type t into s.
func (c *constrainer) object(t reflect.Type, s *openapi3.Schema) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || s.Properties == nil || c.seen[t] {
		return
	}
	c.seen[t] = true
	defer delete(c.seen, t)
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			c.object(f.Type, s) // flattened, as encoding/json does
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		ref := s.Properties[name]
		if ref == nil || ref.Value == nil || ref.Ref != "" {
			continue
		}
		rules, mustGive := c.d.FieldRules(f)
		v := cloneSchema(ref.Value)
		s.Properties[name] = &openapi3.SchemaRef{Value: v}
		if mustGive && !contains(s.Required, name) {
			s.Required = append(s.Required, name)
		}
		c.field(f.Type, v, rules)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// field writes rules, the rules of a field of type ft, into its schema s.
func (c *constrainer) field(ft reflect.Type, s *openapi3.Schema, rules operations.Rules) {
	var own, elem operations.Rules
	omitempty := false
	for _, r := range rules {
		switch {
		case r.Elem:
			r.Elem = false // the element's own rule
			elem = append(elem, r)
		case r.Name == "omitempty":
			omitempty = true
		default:
			own = append(own, r)
		}
	}
	t := ft
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	target := s
	zero, scalar := zeroOf(t)
	if omitempty && scalar && ft.Kind() != reflect.Pointer && len(own) > 0 {
		// The validator skips the zero value; the schema accepts it too.
		target = &openapi3.Schema{}
		s.AnyOf = openapi3.SchemaRefs{
			{Value: &openapi3.Schema{Enum: []any{zero}}},
			{Value: target},
		}
	}
	applyRules(own, target, t)
	switch t.Kind() {
	case reflect.Slice, reflect.Array:
		if s.Items != nil && s.Items.Value != nil && s.Items.Ref == "" {
			items := cloneSchema(s.Items.Value)
			s.Items = &openapi3.SchemaRef{Value: items}
			c.field(t.Elem(), items, elem)
		}
	case reflect.Map:
		if ap := s.AdditionalProperties.Schema; ap != nil && ap.Value != nil && ap.Ref == "" {
			vals := cloneSchema(ap.Value)
			s.AdditionalProperties.Schema = &openapi3.SchemaRef{Value: vals}
			c.field(t.Elem(), vals, elem)
		}
	case reflect.Struct:
		c.object(t, s)
	}
}

// zeroOf returns the JSON value a zero scalar of kind t decodes from, and
// whether t is a scalar.
func zeroOf(t reflect.Type) (any, bool) {
	switch t.Kind() {
	case reflect.String:
		return "", true
	case reflect.Bool:
		return false, true
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		return 0, true
	}
	return nil, false
}

// applyRules writes the rules of one value of type t into s; a rule
// JSON Schema cannot say goes into the extensionRules extension.
func applyRules(rules operations.Rules, s *openapi3.Schema, t reflect.Type) {
	for _, r := range rules {
		if !applyRule(r, s, t) {
			ext := map[string]any{"rule": r.Name}
			if r.Param != "" {
				ext["param"] = r.Param
			}
			if desc := r.Doc; desc != "" {
				ext["description"] = desc
			} else {
				ext["description"] = r.String()
			}
			if s.Extensions == nil {
				s.Extensions = map[string]any{}
			}
			list, _ := s.Extensions[extensionRules].([]any)
			s.Extensions[extensionRules] = append(list, ext)
		}
	}
}

// applyRule writes rule r into s and reports whether JSON Schema could
// say it.
func applyRule(r operations.Rule, s *openapi3.Schema, t reflect.Type) bool {
	kind := t.Kind()
	size := kind == reflect.String || kind == reflect.Slice || kind == reflect.Array || kind == reflect.Map
	number := !size && kind != reflect.Bool && kind != reflect.Struct && kind != reflect.Interface
	if t == reflect.TypeFor[time.Duration]() || (size && kind != reflect.String && t.Elem().Kind() == reflect.Uint8) {
		return false // a duration's bounds are durations; []byte is base64
	}
	switch r.Name {
	case "required":
		applyRequired(s, kind, number)
		return true
	case "min", "gte", "max", "lte", "gt", "lt", "len":
		return applyBound(r, s, kind, size, number)
	case "oneof":
		return applyOneOf(r, s, kind)
	case "pattern":
		if kind != reflect.String || s.Pattern != "" {
			return false
		}
		s.Pattern = r.Param
		return true
	case "email", "uuid", "uri", "url":
		if kind != reflect.String {
			return false
		}
		s.Format = strings.Replace(r.Name, "url", "uri", 1)
		return true
	}
	return false
}

// applyRequired writes "required" into the schema s of a value of kind:
// a string is not empty, a bool is true, a number is not zero.
func applyRequired(s *openapi3.Schema, kind reflect.Kind, number bool) {
	switch {
	case kind == reflect.String:
		if s.MinLength < 1 {
			s.MinLength = 1
		}
	case kind == reflect.Bool:
		s.Enum = []any{true}
	case number:
		s.Not = &openapi3.SchemaRef{Value: &openapi3.Schema{Enum: []any{0}}}
	}
}

// applyOneOf writes a oneof rule into s as an enum, and reports whether
// every value is one of kind.
func applyOneOf(r operations.Rule, s *openapi3.Schema, kind reflect.Kind) bool {
	var vals []any
	for _, v := range r.Values() {
		x, ok := typedValue(v, kind)
		if !ok {
			return false
		}
		vals = append(vals, x)
	}
	s.Enum = vals
	return true
}

// applyBound writes a bound rule (min, max, gte, lte, gt, lt, len) into s.
func applyBound(r operations.Rule, s *openapi3.Schema, kind reflect.Kind, size, number bool) bool {
	if size {
		n, err := strconv.ParseUint(r.Param, 10, 63)
		if err != nil {
			return false
		}
		lo, hi := &n, &n
		switch r.Name {
		case "min", "gte":
			hi = nil
		case "max", "lte":
			lo = nil
		case "gt":
			n1 := n + 1
			lo, hi = &n1, nil
		case "lt":
			if n == 0 {
				return false
			}
			n1 := n - 1
			lo, hi = nil, &n1
		}
		setSize(s, kind, lo, hi)
		return true
	}
	if !number {
		return false
	}
	x, err := strconv.ParseFloat(r.Param, 64)
	if err != nil {
		return false
	}
	switch r.Name {
	case "min", "gte":
		s.Min = &x
	case "max", "lte":
		s.Max = &x
	case "gt":
		s.WithExclusiveMinValue(x)
	case "lt":
		s.WithExclusiveMaxValue(x)
	case "len":
		s.Min, s.Max = &x, &x
	}
	return true
}

// setSize sets the length bounds of a string, an array or an object.
func setSize(s *openapi3.Schema, kind reflect.Kind, lo, hi *uint64) {
	switch kind {
	case reflect.String:
		if lo != nil {
			s.MinLength = *lo
		}
		if hi != nil {
			s.MaxLength = new(*hi)
		}
	case reflect.Map:
		if lo != nil {
			s.MinProps = *lo
		}
		if hi != nil {
			s.MaxProps = new(*hi)
		}
	default:
		if lo != nil {
			s.MinItems = *lo
		}
		if hi != nil {
			s.MaxItems = new(*hi)
		}
	}
}

// typedValue parses a oneof value for a field of kind.
func typedValue(v string, kind reflect.Kind) (any, bool) {
	switch kind {
	case reflect.String:
		return v, true
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, err := strconv.ParseInt(v, 10, 64)
		return n, err == nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		n, err := strconv.ParseUint(v, 10, 64)
		return n, err == nil
	case reflect.Float32, reflect.Float64:
		x, err := strconv.ParseFloat(v, 64)
		return x, err == nil
	}
	return nil, false
}

// ConstrainParam writes the constraints of input field f, bound to a path
// or query parameter, into its schema s. It reports whether f must be
// given.
func ConstrainParam(d *operations.Descriptor, f reflect.StructField, s *openapi3.Schema) bool {
	rules, mustGive := d.FieldRules(f)
	c := constrainer{d: d, seen: map[reflect.Type]bool{}}
	c.field(f.Type, s, rules)
	return mustGive
}
