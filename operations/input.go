package operations

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"sync"

	"github.com/sundial-go/sundial/pipeline"
)

// The codes of the input checks' outcomes, both VALIDATION.
const (
	CodeUnknownField = "KERNEL_VALIDATION_003" // an input field the input type does not have
	CodeConstraint   = "KERNEL_VALIDATION_007" // input values break their validate tags
)

// InputPolicy says how strictly an operation reads its input, the same on
// every protocol. The HTTP adapter applies it to the JSON body, the CLI
// adapter to --input, and the gRPC adapter to the request message. The
// zero value is strict. A field the input type does not have is then a
// VALIDATION outcome, code CodeUnknownField, with details.field naming it.
// So is a key whose case differs from the field's JSON name. See
// docs/pipeline.md, "One input policy".
type InputPolicy struct {
	// AllowUnknownFields ignores fields the input type does not have,
	// instead of rejecting the call.
	AllowUnknownFields bool
	// FoldKeyCase matches a JSON key to a field whose JSON name differs
	// only in case ("Amount" sets amount), as encoding/json does, instead
	// of treating the key as an unknown field. It has no effect on gRPC,
	// whose messages carry field numbers, not names.
	FoldKeyCase bool
}

// UnknownField returns the VALIDATION outcome of an input field the input
// type does not have; path names it ("extra", "lines[1].sku", "#7" for an
// unknown protobuf field number) and hint, if not empty, is the field the
// caller probably meant.
func UnknownField(path, hint string) *pipeline.Error {
	msg := fmt.Sprintf("Unknown field '%s'.", path)
	if hint != "" {
		msg = fmt.Sprintf("Unknown field '%s'; field names are case-sensitive (did you mean '%s'?).", path, hint)
	}
	return pipeline.NewError(pipeline.KindValidation, CodeUnknownField, msg).WithDetail("field", path)
}

// CheckJSON checks the keys of the JSON document data against input type
// t under policy p (an operation's Descriptor.Input and InputPolicy), and
// returns the outcome of the first key, in the document's order, that has
// no field (UnknownField), or nil. A document that is not valid JSON is
// left to the decoder, which reports it: CheckJSON returns nil. Only the
// first JSON value of data is read, as a json.Decoder would.
//
// It walks the document's bytes rather than decoding it into a generic
// tree: a valid input whose keys hold no escape and no non-ASCII byte
// costs no allocation. Every occurrence of a repeated key is checked,
// where encoding/json keeps the last one.
func CheckJSON(t reflect.Type, p InputPolicy, data []byte) *pipeline.Error {
	if t == nil || p.AllowUnknownFields {
		return nil // nothing is unknown (a wrong case is then unknown too)
	}
	w := keyWalk{data: data, p: p}
	if !w.value(t) || w.found == nil || !json.Valid(data[:w.i]) {
		return nil
	}
	return w.found
}

// fieldSet is the JSON fields of a struct type, by exact name and by
// lower-cased name.
type fieldSet struct {
	exact  map[string]reflect.Type
	folded map[string]string // lower-cased name -> exact name
}

var fieldSets sync.Map // reflect.Type -> *fieldSet

// jsonFields returns the fields encoding/json sees in struct type t:
// exported, named by their json tag, "-" skipped, untagged embedded
// structs flattened (an outer field hides an inner one of the same name).
func jsonFields(t reflect.Type) *fieldSet {
	if fs, ok := fieldSets.Load(t); ok {
		return fs.(*fieldSet)
	}
	fs := &fieldSet{exact: map[string]reflect.Type{}, folded: map[string]string{}}
	depth := map[string]int{}
	var walk func(t reflect.Type, d int)
	walk = func(t reflect.Type, d int) {
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "-" {
				continue
			}
			if f.Anonymous && name == "" {
				et := f.Type
				if et.Kind() == reflect.Pointer {
					et = et.Elem()
				}
				if et.Kind() == reflect.Struct {
					if d < 16 {
						walk(et, d+1)
					}
					continue
				}
			}
			if !f.IsExported() {
				continue
			}
			if name == "" {
				name = f.Name
			}
			if prev, dup := depth[name]; dup && prev <= d {
				continue // hidden by a shallower field, as in encoding/json
			}
			depth[name] = d
			fs.exact[name] = f.Type
			if _, dup := fs.folded[strings.ToLower(name)]; !dup {
				fs.folded[strings.ToLower(name)] = name
			}
		}
	}
	walk(t, 0)
	actual, _ := fieldSets.LoadOrStore(t, fs)
	return actual.(*fieldSet)
}
