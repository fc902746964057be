package cliadapter

import (
	"bytes"
	"context"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"time"
	"unicode"

	"github.com/spf13/pflag"

	"github.com/sundial-go/sundial/adapters/internal/jsontype"
	"github.com/sundial-go/sundial/adapters/internal/outcome"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
)

// maxInputBytes bounds the JSON document read by --input (from the flag's
// value or from standard input with "--input -"). A larger document is a
// validation error, never a partial read.
const maxInputBytes = 16 << 20

// flagName returns the command-line flag name of an input field whose JSON
// name is jsonName. camelCase and snake_case become kebab-case. Runs of
// capitals are kept together as one word: "delayMs" -> "delay-ms",
// "orderID" -> "order-id", "HTTPPort" -> "http-port", "amount_cents" ->
// "amount-cents". A plain flag name has letters, digits and single inner
// hyphens, and starts with a letter. flagName returns "" when the result
// would not be one; such a field can only be set with --input.
func flagName(jsonName string) string {
	name := kebab(jsonName)
	if !plainFlagName(name) {
		return ""
	}
	return name
}

// kebab returns jsonName in lower-case kebab-case, as flagName describes.
func kebab(jsonName string) string {
	rs := []rune(jsonName)
	var b strings.Builder
	for i, r := range rs {
		if r == '_' || r == '-' {
			b.WriteByte('-')
			continue
		}
		if wordStart(rs, i) {
			b.WriteByte('-')
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
}

// wordStart reports whether the capital rs[i] starts a new word: after a
// lower-case letter or a digit, or as the last capital of a run followed
// by a lower-case letter ("HTTPPort": the P of "Port").
func wordStart(rs []rune, i int) bool {
	if i == 0 || !unicode.IsUpper(rs[i]) {
		return false
	}
	prev := rs[i-1]
	nextLower := i+1 < len(rs) && unicode.IsLower(rs[i+1])
	return unicode.IsLower(prev) || unicode.IsDigit(prev) || (unicode.IsUpper(prev) && nextLower)
}

// plainFlagName reports whether name is a plain flag name: lower-case
// letters, digits and single inner hyphens, starting with a letter.
func plainFlagName(name string) bool {
	if name == "" || name[0] < 'a' || name[0] > 'z' || strings.HasSuffix(name, "-") || strings.Contains(name, "--") {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			return false
		}
	}
	return true
}

// inputField is one input field that has a flag.
type inputField struct {
	index    []int         // reflect index path from the input struct
	json     string        // JSON name
	flag     string        // flag name
	value    reflect.Value // pointer to the variable pflag parses into
	optional bool          // the field is a pointer: set it to a copy of *value
	values   []string      // the values of its oneof rule: the flag completes them
}

// inputFlags binds the fields of an operation's input struct to flags of a
// pflag.FlagSet. It decodes an input from --input JSON and those flags.
//
// pflag parses each flag into a variable of its own (value). decode copies
// only the flags the user gave into a fresh input. So a flag's zero
// default never overwrites a field set by --input.
type inputFlags struct {
	typ       reflect.Type // the input type (may be a non-struct)
	fields    []inputField
	inputOnly []string // JSON names of fields without a flag (settable with --input only)
	policy    operations.InputPolicy
	desc      *operations.Descriptor // its rules check the input (nil: the built-in rules)
}

// reservedFlags are the flag names the adapter itself defines on an
// operation command; an input field that would clash is settable with
// --input only.
var reservedFlags = map[string]bool{"input": true, "help": true, "timeout": true, "output": true, "config": true}

// newInputFlags defines one flag on fs for each input field of t whose type
// pflag can parse (strings, booleans, integers, floats, time.Duration,
// []string, []int, and pointers to the scalars). Fields are found with
// encoding/json's rules: exported, named by their json tag, "-" skipped,
// untagged embedded structs flattened. A field whose flag name is reserved,
// not a plain name, or already taken keeps no flag and is listed in
// inputOnly. A field's validate tag is shown in its flag's help
// ("(required; at most 100 characters)"), with d's custom rules.
func newInputFlags(t reflect.Type, fs *pflag.FlagSet, d *operations.Descriptor) *inputFlags {
	f := &inputFlags{typ: t, desc: d}
	if t == nil {
		return f
	}
	if t.Kind() == reflect.Struct {
		f.walk(t, nil, fs, map[string]bool{})
	}
	return f
}

func (f *inputFlags) walk(t reflect.Type, index []int, fs *pflag.FlagSet, seen map[string]bool) {
	for i := range t.NumField() {
		sf := t.Field(i)
		path := append(append([]int(nil), index...), i)
		name, tagged := jsonName(sf)
		if name == "-" {
			continue
		}
		if sf.Anonymous && !tagged && sf.Type.Kind() == reflect.Struct {
			f.walk(sf.Type, path, fs, seen)
			continue
		}
		if !sf.IsExported() {
			continue
		}
		flag := flagName(name)
		if flag == "" || reservedFlags[flag] || seen[flag] || fs.Lookup(flag) != nil {
			f.inputOnly = append(f.inputOnly, name)
			continue
		}
		field := inputField{index: path, json: name, flag: flag}
		ft := sf.Type
		if ft.Kind() == reflect.Pointer {
			ft, field.optional = ft.Elem(), true
		}
		field.value = reflect.New(ft)
		usage := sf.Tag.Get("help")
		if usage == "" {
			usage = fmt.Sprintf("input field %q", name)
		}
		rules, _ := f.desc.FieldRules(sf)
		if text := rules.String(); text != "" {
			usage += " (" + text + ")"
		}
		for _, r := range rules {
			if !r.Elem && r.Values() != nil {
				field.values = r.Values()
			}
		}
		if !defineFlag(fs, flag, field.value, usage) {
			f.inputOnly = append(f.inputOnly, name)
			continue
		}
		seen[flag] = true
		f.fields = append(f.fields, field)
	}
}

// jsonName returns the JSON name of a struct field and whether its tag
// named it.
func jsonName(sf reflect.StructField) (string, bool) {
	tag := sf.Tag.Get("json")
	if tag == "-" {
		return "-", true
	}
	name, _, _ := strings.Cut(tag, ",")
	if name != "" {
		return name, true
	}
	return sf.Name, false
}

var (
	durationType        = reflect.TypeFor[time.Duration]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
	jsonUnmarshalerType = reflect.TypeFor[json.Unmarshaler]()
)

// textValue is a pflag.Value for a type that parses itself from text (its
// JSON string form usually agrees with it, e.g. net/netip.Addr).
type textValue struct{ u encoding.TextUnmarshaler }

func (v textValue) Set(s string) error { return v.u.UnmarshalText([]byte(s)) }
func (v textValue) Type() string       { return "text" }
func (v textValue) String() string {
	if m, ok := v.u.(encoding.TextMarshaler); ok && !reflect.ValueOf(v.u).IsNil() {
		if b, err := m.MarshalText(); err == nil {
			return string(b)
		}
	}
	return ""
}

// defineFlag defines a pflag flag that parses into the variable p points
// to, converting p to a pointer of the basic type pflag knows (a named type
// such as `type Cents int` shares int's representation). It reports false
// for types pflag cannot parse.
func defineFlag(fs *pflag.FlagSet, name string, p reflect.Value, usage string) bool {
	t := p.Type().Elem()
	switch {
	case p.Type().Implements(textUnmarshalerType):
		fs.Var(textValue{p.Interface().(encoding.TextUnmarshaler)}, name, usage)
		return true
	case p.Type().Implements(jsonUnmarshalerType):
		return false // JSON has its own syntax for it; a flag would disagree
	case t == durationType:
		fs.DurationVar(asPointer[time.Duration](p), name, 0, usage)
		return true
	case t.Kind() == reflect.Slice:
		return defineSliceFlag(fs, name, p, usage)
	}
	define, ok := scalarFlags[t.Kind()]
	if ok {
		define(fs, name, p, usage)
	}
	return ok
}

// asPointer converts p, a pointer to a type whose representation is T's,
// to a *T.
func asPointer[T any](p reflect.Value) *T {
	return p.Convert(reflect.TypeFor[*T]()).Interface().(*T)
}

// scalarFlags define the flag of a field of a basic kind, parsing into
// the variable p points to.
var scalarFlags = map[reflect.Kind]func(fs *pflag.FlagSet, name string, p reflect.Value, usage string){
	reflect.String: func(fs *pflag.FlagSet, name string, p reflect.Value, usage string) {
		fs.StringVar(asPointer[string](p), name, "", usage)
	},
	reflect.Bool: func(fs *pflag.FlagSet, name string, p reflect.Value, usage string) {
		fs.BoolVar(asPointer[bool](p), name, false, usage)
	},
	reflect.Int: func(fs *pflag.FlagSet, name string, p reflect.Value, usage string) {
		fs.IntVar(asPointer[int](p), name, 0, usage)
	},
	reflect.Int8: func(fs *pflag.FlagSet, name string, p reflect.Value, usage string) {
		fs.Int8Var(asPointer[int8](p), name, 0, usage)
	},
	reflect.Int16: func(fs *pflag.FlagSet, name string, p reflect.Value, usage string) {
		fs.Int16Var(asPointer[int16](p), name, 0, usage)
	},
	reflect.Int32: func(fs *pflag.FlagSet, name string, p reflect.Value, usage string) {
		fs.Int32Var(asPointer[int32](p), name, 0, usage)
	},
	reflect.Int64: func(fs *pflag.FlagSet, name string, p reflect.Value, usage string) {
		fs.Int64Var(asPointer[int64](p), name, 0, usage)
	},
	reflect.Uint: func(fs *pflag.FlagSet, name string, p reflect.Value, usage string) {
		fs.UintVar(asPointer[uint](p), name, 0, usage)
	},
	reflect.Uint8: func(fs *pflag.FlagSet, name string, p reflect.Value, usage string) {
		fs.Uint8Var(asPointer[uint8](p), name, 0, usage)
	},
	reflect.Uint16: func(fs *pflag.FlagSet, name string, p reflect.Value, usage string) {
		fs.Uint16Var(asPointer[uint16](p), name, 0, usage)
	},
	reflect.Uint32: func(fs *pflag.FlagSet, name string, p reflect.Value, usage string) {
		fs.Uint32Var(asPointer[uint32](p), name, 0, usage)
	},
	reflect.Uint64: func(fs *pflag.FlagSet, name string, p reflect.Value, usage string) {
		fs.Uint64Var(asPointer[uint64](p), name, 0, usage)
	},
	reflect.Float32: func(fs *pflag.FlagSet, name string, p reflect.Value, usage string) {
		fs.Float32Var(asPointer[float32](p), name, 0, usage)
	},
	reflect.Float64: func(fs *pflag.FlagSet, name string, p reflect.Value, usage string) {
		fs.Float64Var(asPointer[float64](p), name, 0, usage)
	},
}

// defineSliceFlag defines the flag of a slice field: exactly []string or
// []int ([]Color is not []string). It reports false for other slices.
func defineSliceFlag(fs *pflag.FlagSet, name string, p reflect.Value, usage string) bool {
	switch p.Type().Elem().Elem() {
	case reflect.TypeFor[string]():
		fs.StringSliceVar(asPointer[[]string](p), name, nil, usage+" (repeat or comma-separate)")
	case reflect.TypeFor[int]():
		fs.IntSliceVar(asPointer[[]int](p), name, nil, usage+" (repeat or comma-separate)")
	default:
		return false
	}
	return true
}

// decode returns a pointer to a new input value: the JSON document raw (if
// not nil) decoded into it, then every flag set on fs (fs.Changed) copied
// over the field it names. Errors are VALIDATION-worthy descriptions of the
// user's input.
func (f *inputFlags) decode(fs *pflag.FlagSet, raw []byte) (any, error) {
	if f.typ == nil {
		return nil, nil
	}
	in := reflect.New(f.typ)
	if raw != nil {
		// The operation's input policy first (unknown fields, key case:
		// the same answer as over HTTP and gRPC), then the decoding.
		if perr := operations.CheckJSON(f.typ, f.policy, raw); perr != nil {
			return nil, perr
		}
		if err := decodeJSON(raw, in.Interface(), f.policy.AllowUnknownFields); err != nil {
			return nil, err
		}
	}
	for _, field := range f.fields {
		if fs == nil || !fs.Changed(field.flag) {
			continue
		}
		dst := in.Elem().FieldByIndex(field.index)
		if field.optional {
			v := reflect.New(field.value.Type().Elem())
			v.Elem().Set(field.value.Elem())
			dst.Set(v)
		} else {
			dst.Set(field.value.Elem())
		}
	}
	if perr := f.desc.CheckConstraints(in.Interface()); perr != nil {
		return nil, f.flagViolations(perr) // the values' validate tags, as over HTTP and gRPC
	}
	return in.Interface(), nil
}

// flagViolations names each failing field of a constraint outcome by its
// flag ("--name"), or, for a field without one, by its path in --input
// ("--input lines[0].sku").
func (f *inputFlags) flagViolations(perr *pipeline.Error) *pipeline.Error {
	return outcome.NameFields(perr, f.flagOf)
}

// flagOf returns the flag of the field at JSON path, or the --input path.
func (f *inputFlags) flagOf(path string) string {
	for _, field := range f.fields {
		if field.json == path {
			return "--" + field.flag
		}
	}
	return "--input " + path
}

// inputError is a malformed --input document. Field is the JSON name of
// the offending field when known.
type inputError struct {
	// Field is the JSON name of the offending field, or "".
	Field string
	// Msg says what is wrong.
	Msg string
	// Misfit reports a well-formed JSON document that does not fit the
	// input type (an unknown field, a value of the wrong type), as opposed
	// to a malformed one.
	Misfit bool
}

func (e *inputError) Error() string {
	if e.Field != "" {
		return "cliadapter: --input: field " + e.Field + ": " + e.Msg
	}
	return "cliadapter: --input: " + e.Msg
}

// decodeJSON decodes exactly one JSON value from raw into v, rejecting
// unknown fields and trailing data. Errors are *inputError with messages
// that name JSON fields and types, never Go ones.
func decodeJSON(raw []byte, v any, allowUnknown bool) error {
	if len(bytes.TrimSpace(raw)) == 0 {
		return &inputError{Msg: "empty document, want a JSON object"}
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if !allowUnknown {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(v); err != nil {
		return asInputError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return &inputError{Msg: fmt.Sprintf("unexpected data after the JSON value at offset %d", dec.InputOffset())}
	}
	return nil
}

func asInputError(err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return &inputError{Msg: fmt.Sprintf("invalid JSON at offset %d: %s", syn.Offset, strings.TrimPrefix(syn.Error(), "json: "))}
	case errors.As(err, &typ):
		if typ.Field == "" {
			return &inputError{Msg: fmt.Sprintf("cannot use a JSON %s here, want %s", typ.Value, jsonKind(typ.Type)), Misfit: true}
		}
		return &inputError{Field: typ.Field, Msg: fmt.Sprintf("cannot use a JSON %s, want %s", typ.Value, jsonKind(typ.Type)), Misfit: true}
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return &inputError{Msg: "truncated JSON document"}
	}
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
		return &inputError{Field: strings.Trim(name, `"`), Msg: "unknown field", Misfit: true}
	}
	return &inputError{Msg: strings.TrimPrefix(msg, "json: ")}
}

// jsonKind names the JSON shape a Go type wants: "a string", "an integer
// that fits int64".
func jsonKind(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch name := jsontype.Of(t); name {
	case "":
		return "a " + t.Kind().String()
	case "integer":
		return "an integer that fits " + t.Kind().String()
	case "array", "object":
		return "an " + name
	default:
		return "a " + name
	}
}

// readInput returns the --input document: the flag's value, or standard
// input when the value is "-". It reads at most maxInputBytes.
func readInput(value string, stdin io.Reader) ([]byte, error) {
	if value != "-" {
		if len(value) > maxInputBytes {
			return nil, &inputError{Msg: fmt.Sprintf("document larger than %d bytes", maxInputBytes)}
		}
		return []byte(value), nil
	}
	if stdin == nil {
		return nil, &inputError{Msg: "no standard input to read"}
	}
	b, err := io.ReadAll(io.LimitReader(stdin, maxInputBytes+1))
	if err != nil {
		return nil, &inputError{Msg: "reading standard input: " + err.Error()}
	}
	if len(b) > maxInputBytes {
		return nil, &inputError{Msg: fmt.Sprintf("document larger than %d bytes", maxInputBytes)}
	}
	return b, nil
}

// readStdin reads the --input - document from stdin (see readInput). It
// waits for it until the deadline or until ctx ends, whichever comes
// first. A zero deadline is none; ctx ends at the first SIGINT or SIGTERM.
// It then returns TIMEOUT (KERNEL_TIMEOUT_001) or CANCELLED
// (KERNEL_CANCELLED_001) as a *pipeline.Error. CANCELLED carries the
// context's cause, a *signalError for a signal. A document that cannot be
// read returns an *inputError. A deadline that has passed, or a context
// that has ended, before the read starts returns at once without reading.
//
// A read from an *os.File cannot be interrupted portably: a terminal, or a
// pipe the writer keeps open. So the read runs on a goroutine of its own,
// and readStdin stops waiting for it. That goroutine stays blocked until
// stdin yields data, an error or end of file. For the process's own stdin,
// that is until the process exits, right after the outcome is reported.
// Whatever it reads then is discarded. So an in-process caller must not
// hand its own reader to a later command before closing it.
func readStdin(ctx context.Context, stdin io.Reader, deadline time.Time) ([]byte, error) {
	if err := stopped(ctx, deadline); err != nil {
		return nil, err
	}
	type read struct {
		b   []byte
		err error
	}
	done := make(chan read, 1) // buffered: the reader never waits for us
	go func() {
		b, err := readInput("-", stdin)
		done <- read{b, err}
	}()
	var expired <-chan time.Time
	if !deadline.IsZero() {
		t := time.NewTimer(time.Until(deadline))
		defer t.Stop()
		expired = t.C
	}
	select {
	case r := <-done:
		return r.b, r.err
	case <-expired:
		return nil, pipeline.ErrTimeout()
	case <-ctx.Done():
		return nil, ctxOutcome(ctx)
	}
}

// stopped returns the outcome of a read that must not start: TIMEOUT when
// the deadline has passed, CANCELLED (or TIMEOUT) when ctx has ended; nil
// otherwise.
func stopped(ctx context.Context, deadline time.Time) error {
	switch {
	case !deadline.IsZero() && !time.Now().Before(deadline):
		return pipeline.ErrTimeout()
	case ctx.Err() != nil:
		return ctxOutcome(ctx)
	}
	return nil
}

// ctxOutcome is the outcome of a wait that ctx ended: TIMEOUT when ctx's
// own deadline passed, else CANCELLED wrapping the context's cause.
func ctxOutcome(ctx context.Context) *pipeline.Error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return pipeline.ErrTimeout()
	}
	return pipeline.Wrap(pipeline.KindCanceled, pipeline.CodeCanceled, pipeline.ErrCanceled().Message(), context.Cause(ctx))
}
