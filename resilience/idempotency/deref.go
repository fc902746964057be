package idempotency

import "reflect"

// derefOutput returns *p: a handler returns its output by value.
func derefOutput(p any) any {
	v := reflect.ValueOf(p)
	if v.Kind() == reflect.Pointer && !v.IsNil() {
		return v.Elem().Interface()
	}
	return p
}
