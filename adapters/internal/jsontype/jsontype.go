// Package jsontype names the JSON type a Go type decodes from, for the
// adapters' messages about input of the wrong type.
package jsontype

import "reflect"

// Of returns the JSON type a Go type decodes from: "string", "boolean",
// "integer", "number", "array" or "object". It follows pointers. It is ""
// for any other kind, such as an interface or a channel.
func Of(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "integer"
	case reflect.Float32, reflect.Float64:
		return "number"
	case reflect.Slice, reflect.Array:
		return "array"
	case reflect.Struct, reflect.Map:
		return "object"
	}
	return ""
}
