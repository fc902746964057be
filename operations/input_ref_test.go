package operations

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strconv"
	"strings"

	"github.com/sundial-go/sundial/pipeline"
)

// checkJSONTree is CheckJSON as it was before it walked the bytes: it
// decodes the document into a generic tree and checks that. It is the
// reference FuzzCheckJSONAgrees holds CheckJSON to.
//
// It checks the keys of the JSON document data against input type
// t under policy p (an operation's Descriptor.Input and InputPolicy), and
// returns the outcome of the first key that has no field (UnknownField),
// or nil. A document that is not valid JSON is left to the decoder, which
// reports it: CheckJSON returns nil.
func checkJSONTree(t reflect.Type, p InputPolicy, data []byte) *pipeline.Error {
	if t == nil || p.AllowUnknownFields && p.FoldKeyCase || len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	var doc any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		return nil
	}
	return checkValueTree(t, p, doc, "")
}

// checkValue checks the JSON value v, at path, against type t under
// policy p: the keys of objects, in the elements of arrays and maps too.
func checkValueTree(t reflect.Type, p InputPolicy, v any, path string) *pipeline.Error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch x := v.(type) {
	case map[string]any:
		switch t.Kind() {
		case reflect.Struct:
			return checkFieldsTree(t, p, x, path)
		case reflect.Map:
			for key, val := range x {
				if err := checkValueTree(t.Elem(), p, val, joinTree(path, key)); err != nil {
					return err
				}
			}
		}
	case []any:
		if t.Kind() == reflect.Slice || t.Kind() == reflect.Array {
			for i, val := range x {
				if err := checkValueTree(t.Elem(), p, val, path+"["+strconv.Itoa(i)+"]"); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// checkFields checks the keys of object x, at path, against the JSON
// fields of struct type t under policy p, and the values of the keys it
// knows.
func checkFieldsTree(t reflect.Type, p InputPolicy, x map[string]any, path string) *pipeline.Error {
	fields := jsonFields(t)
	for key, val := range x {
		ft, ok := fields.exact[key]
		if !ok {
			exact, folded := fields.folded[strings.ToLower(key)]
			if folded && p.FoldKeyCase {
				ft, ok = fields.exact[exact], true
			} else if !p.AllowUnknownFields {
				hint := ""
				if folded {
					hint = joinTree(path, exact)
				}
				return UnknownField(joinTree(path, key), hint)
			}
		}
		if ok {
			if err := checkValueTree(ft, p, val, joinTree(path, key)); err != nil {
				return err
			}
		}
	}
	return nil
}

func joinTree(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}
