package httpadapter

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/sundial-go/sundial/adapters/internal/fields"
	"github.com/sundial-go/sundial/adapters/internal/jsontype"
	"github.com/sundial-go/sundial/pipeline"
)

// binder fills an operation's input from a request: the JSON body first,
// then path parameters, then (for GET, HEAD and DELETE) query parameters.
// The path names the resource, so it always wins: a field a path
// parameter fills is never read from the query.
//
// It is ours rather than echo's DefaultBinder because a wrong type must be
// a VALIDATION outcome that names the field (details.field), and echo's
// binder reports strconv errors without the field. The plan — which field
// each parameter sets — is computed once, when the route is mounted.
type binder struct {
	typ    reflect.Type // the input type (what NewInput points to)
	params []paramField // path parameters, in route order
	query  map[string]fieldRef
}

type fieldRef struct {
	index []int
}

type paramField struct {
	param string
	fieldRef
}

// newBinder plans the binding of input type t for a route whose path
// parameters are params. It fails when a path parameter has no field to
// go to, or when the input is not a struct but the route has parameters.
func newBinder(t reflect.Type, method string, params []string) (*binder, error) {
	b := &binder{typ: t}
	if t.Kind() != reflect.Struct {
		if len(params) > 0 {
			return nil, fmt.Errorf("input type %v is not a struct, so path parameter %q has nowhere to go", t, params[0])
		}
		return b, nil
	}
	fields := reflect.VisibleFields(t)
	for _, p := range params {
		pf, err := paramFieldOf(t, fields, p)
		if err != nil {
			return nil, err
		}
		b.params = append(b.params, pf)
	}
	b.query = queryFields(fields, method == http.MethodGet || method == http.MethodDelete || method == http.MethodHead)
	for name, ref := range b.query {
		if b.fromPath(ref) {
			delete(b.query, name)
		}
	}
	return b, nil
}

// fromPath reports whether a path parameter fills the field ref.
func (b *binder) fromPath(ref fieldRef) bool {
	for _, p := range b.params {
		if slices.Equal(p.index, ref.index) {
			return true
		}
	}
	return false
}

// paramFieldOf returns the field of struct t (whose visible fields are
// fields) that path parameter p goes to.
func paramFieldOf(t reflect.Type, fields []reflect.StructField, p string) (paramField, error) {
	ref, ok := findField(fields, "param", p)
	if !ok {
		return paramField{}, fmt.Errorf("path parameter %q has no field in %v (tag one `param:%q`)", p, t, p)
	}
	if f := t.FieldByIndex(ref.index); !settable(f.Type) {
		return paramField{}, fmt.Errorf("path parameter %q goes to field %v.%s of unsupported type %v", p, t, f.Name, f.Type)
	}
	return paramField{p, ref}, nil
}

// queryFields returns the fields query parameters go to, by parameter
// name: those tagged `query:"name"`, and with byName the others by their
// JSON name. It returns nil when there are none.
func queryFields(fields []reflect.StructField, byName bool) map[string]fieldRef {
	var query map[string]fieldRef
	for _, f := range fields {
		if !f.IsExported() || f.Anonymous {
			continue
		}
		name, tagged := tagName(f, "query")
		if !tagged {
			if !byName {
				continue
			}
			name = jsonName(f)
		}
		if name == "" || name == "-" || !settable(f.Type) {
			continue
		}
		if query == nil {
			query = make(map[string]fieldRef)
		}
		query[name] = fieldRef{index: f.Index}
	}
	return query
}

// findField finds the field for a parameter: the one tagged tag:"p", else
// the one whose JSON name is p, else the one whose Go name is p in any
// case.
func findField(fields []reflect.StructField, tag, p string) (fieldRef, bool) {
	for _, pass := range [3]int{0, 1, 2} {
		for _, f := range fields {
			if !f.IsExported() || f.Anonymous {
				continue
			}
			var match bool
			switch pass {
			case 0:
				n, ok := tagName(f, tag)
				match = ok && n == p
			case 1:
				match = jsonName(f) == p
			case 2:
				match = strings.EqualFold(f.Name, p)
			}
			if match {
				return fieldRef{index: f.Index}, true
			}
		}
	}
	return fieldRef{}, false
}

func tagName(f reflect.StructField, tag string) (string, bool) {
	v, ok := f.Tag.Lookup(tag)
	if !ok {
		return "", false
	}
	name, _, _ := strings.Cut(v, ",")
	return name, name != ""
}

func jsonName(f reflect.StructField) string {
	if n, ok := tagName(f, "json"); ok && n != "-" {
		return n
	}
	return f.Name
}

var textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()

// settable reports whether a parameter string can be stored in a field of
// type t: scalars, pointers to them, encoding.TextUnmarshaler, and slices
// of those (one element per repeated query parameter).
func settable(t reflect.Type) bool {
	if reflect.PointerTo(t).Implements(textUnmarshalerType) {
		return true
	}
	switch t.Kind() {
	case reflect.String, reflect.Bool,
		reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		return true
	case reflect.Pointer:
		return t.Elem().Kind() != reflect.Pointer && settable(t.Elem())
	case reflect.Slice:
		e := t.Elem()
		return e.Kind() != reflect.Slice && e.Kind() != reflect.Uint8 && settable(e)
	}
	return false
}

// bind decodes body (may be empty) into in, a pointer to b.typ, then sets
// path and query parameters. Failures are VALIDATION outcomes naming the
// field.
func (b *binder) bind(r *http.Request, names, values []string, body []byte, in any) *pipeline.Error {
	if len(bytes.TrimSpace(body)) > 0 {
		if err := json.Unmarshal(body, in); err != nil {
			return bodyError(err, body, b.typ)
		}
	}
	if len(b.params) == 0 && len(b.query) == 0 {
		return nil
	}
	v := reflect.ValueOf(in).Elem()
	if err := b.bindParams(r, names, values, v); err != nil {
		return err
	}
	if len(b.query) > 0 && r.URL.RawQuery != "" {
		return b.bindQuery(r.URL.Query(), v)
	}
	return nil
}

// bindParams sets the path parameters (names and values, as echo matched
// them) in the input struct v.
func (b *binder) bindParams(r *http.Request, names, values []string, v reflect.Value) *pipeline.Error {
	for _, p := range b.params {
		raw, ok := paramValue(names, values, p.param)
		if !ok {
			continue
		}
		if r.URL.RawPath != "" {
			// echo matched the escaped path: unescape like Path.
			if u, err := url.PathUnescape(raw); err == nil {
				raw = u
			}
		}
		f, ok := fields.Alloc(v, p.index) // through a nil embedded pointer too
		if !ok {
			continue
		}
		if err := setString(f, raw); err != nil {
			return wrongType(p.param, "path parameter", raw, f.Type())
		}
	}
	return nil
}

// bindQuery sets the query parameters q in the input struct v.
func (b *binder) bindQuery(q url.Values, v reflect.Value) *pipeline.Error {
	for name, vals := range q {
		ref, ok := b.query[name]
		if !ok || len(vals) == 0 {
			continue
		}
		f, ok := fields.Alloc(v, ref.index)
		if !ok {
			continue
		}
		if err := setStrings(f, vals); err != nil {
			return wrongType(name, "query parameter", vals[0], f.Type())
		}
	}
	return nil
}

// paramValue returns the value of the path parameter name.
func paramValue(names, values []string, name string) (string, bool) {
	for i, n := range names {
		if n == name && i < len(values) {
			return values[i], true
		}
	}
	return "", false
}

// setStrings sets a field from one or more values: a slice gets them all,
// anything else the last one.
func setStrings(f reflect.Value, vals []string) error {
	if f.Kind() == reflect.Slice && !reflect.PointerTo(f.Type()).Implements(textUnmarshalerType) {
		s := reflect.MakeSlice(f.Type(), len(vals), len(vals))
		for i, v := range vals {
			if err := setString(s.Index(i), v); err != nil {
				return err
			}
		}
		f.Set(s)
		return nil
	}
	return setString(f, vals[len(vals)-1])
}

func setString(f reflect.Value, s string) error {
	if f.CanAddr() {
		if u, ok := f.Addr().Interface().(encoding.TextUnmarshaler); ok {
			return u.UnmarshalText([]byte(s))
		}
	}
	switch f.Kind() {
	case reflect.Pointer:
		p := reflect.New(f.Type().Elem())
		if err := setString(p.Elem(), s); err != nil {
			return err
		}
		f.Set(p)
	case reflect.String:
		f.SetString(s)
	case reflect.Bool:
		v, err := strconv.ParseBool(s)
		if err != nil {
			return err
		}
		f.SetBool(v)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v, err := strconv.ParseInt(s, 10, f.Type().Bits())
		if err != nil {
			return err
		}
		f.SetInt(v)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v, err := strconv.ParseUint(s, 10, f.Type().Bits())
		if err != nil {
			return err
		}
		f.SetUint(v)
	case reflect.Float32, reflect.Float64:
		v, err := strconv.ParseFloat(s, f.Type().Bits())
		if err != nil {
			return err
		}
		f.SetFloat(v)
	default:
		return errors.New("unsupported type")
	}
	return nil
}

// jsonTypeName names what a Go type looks like in JSON. A type that
// decodes from text is a string; any kind JSON has no name for is an
// object.
func jsonTypeName(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(textUnmarshalerType) {
		return "string"
	}
	if name := jsontype.Of(t); name != "" {
		return name
	}
	return "object"
}

// maxEcho bounds how much of a caller's value is echoed in a message.
const maxEcho = 64

func clip(s string) string {
	if len(s) > maxEcho {
		return s[:maxEcho] + "..."
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

func wrongType(field, where, got string, t reflect.Type) *pipeline.Error {
	want := jsonTypeName(t)
	return pipeline.NewError(pipeline.KindValidation, codeWrongType,
		fmt.Sprintf("The %s '%s' must be %s %s; got %q.", where, clip(field), article(want), want, clip(got))).
		WithDetail("field", clip(field)).WithDetail("expected", want)
}

func article(w string) string {
	if w == "integer" || w == "array" || w == "object" {
		return "an"
	}
	return "a"
}

// bodyError turns a json.Unmarshal error into a VALIDATION outcome that
// names the field when one can be found. Go type names never reach the
// caller. An error chain that cannot be walked (an input's UnmarshalJSON
// returned a typed nil whose methods panic) is a body that could not be
// decoded.
func bodyError(err error, body []byte, t reflect.Type) (e *pipeline.Error) {
	defer func() {
		if recover() != nil || e == nil {
			e = errUndecodable
		}
	}()
	if pe, ok := errors.AsType[*pipeline.Error](err); ok {
		return pe // an input's UnmarshalJSON spoke for itself (nil: see above)
	}
	if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok && te != nil {
		field := te.Field
		if field == "" {
			e := pipeline.NewError(pipeline.KindValidation, codeWrongType,
				fmt.Sprintf("The request body must be a JSON %s; got %s.", jsonTypeName(t), clip(te.Value)))
			return e.WithDetail("field", "").WithDetail("expected", jsonTypeName(t))
		}
		want := jsonTypeName(te.Type)
		return pipeline.NewError(pipeline.KindValidation, codeWrongType,
			fmt.Sprintf("The field '%s' must be %s %s; got %s.", clip(field), article(want), want, clip(te.Value))).
			WithDetail("field", clip(field)).WithDetail("expected", want)
	}
	if se, ok := errors.AsType[*json.SyntaxError](err); ok && se != nil {
		e := pipeline.NewError(pipeline.KindValidation, codeMalformedBody,
			fmt.Sprintf("The request body is not valid JSON: %s (at byte %d).", strings.TrimPrefix(se.Error(), "json: "), se.Offset)).
			WithDetail("offset", se.Offset)
		if f := fieldAt(body, se.Offset); f != "" {
			e = e.WithDetail("field", clip(f))
		}
		return e
	}
	// An input type's own UnmarshalJSON failed, or something else: say
	// what, without its text.
	return errUndecodable
}

var errUndecodable = pipeline.NewError(pipeline.KindValidation, codeMalformedBody, "The request body could not be decoded.")

// fieldAt returns the dotted path of the object member being read, or
// just read, at byte off of body ("items.qty"; array indexes are left out,
// as in json.UnmarshalTypeError.Field), or "" when off is outside any
// member. A syntax error is usually in, or right after, that member's
// value.
func fieldAt(body []byte, off int64) string {
	if off <= 0 {
		return ""
	}
	if off > int64(len(body)) {
		off = int64(len(body))
	}
	var p memberPath
	dec := json.NewDecoder(bytes.NewReader(body[:off]))
	dec.UseNumber()
	for len(p.stack) < 64 {
		tok, err := dec.Token()
		if err != nil {
			break
		}
		p.token(tok)
	}
	return p.String()
}

// memberPath follows the nesting of a JSON text token by token: the open
// objects and arrays, with the member each object is at.
type memberPath struct{ stack []pathFrame }

// pathFrame is one open object (obj) or array; an object waits for a key
// (wantKey) or is at the member key.
type pathFrame struct {
	obj     bool
	wantKey bool
	key     string
}

// token advances the path past one token of the decoder.
func (p *memberPath) token(tok json.Token) {
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			p.stack = append(p.stack, pathFrame{obj: true, wantKey: true})
		case '[':
			p.stack = append(p.stack, pathFrame{})
		default:
			p.stack = p.stack[:len(p.stack)-1]
			p.valueDone()
		}
	case string:
		if n := len(p.stack); n > 0 && p.stack[n-1].obj && p.stack[n-1].wantKey {
			p.stack[n-1].key, p.stack[n-1].wantKey = t, false
			return
		}
		p.valueDone()
	default:
		p.valueDone()
	}
}

// valueDone records the end of a value: an object waits for its next key.
func (p *memberPath) valueDone() {
	if n := len(p.stack); n > 0 && p.stack[n-1].obj {
		p.stack[n-1].wantKey = true
	}
}

// String returns the dotted path of the members the open objects are at.
func (p *memberPath) String() string {
	var parts []string
	for _, f := range p.stack {
		if f.obj && f.key != "" {
			parts = append(parts, f.key)
		}
	}
	return strings.Join(parts, ".")
}

// bufPool recycles request body buffers.
var bufPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}
