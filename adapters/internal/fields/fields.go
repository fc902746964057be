// Package fields sets a struct field by its index path through embedded
// pointers. The path is reflect.StructField.Index, as reflect.VisibleFields
// gives it. Nil embedded pointers on the way are allocated. There,
// reflect.Value.FieldByIndex panics; reading one is
// reflect.Value.FieldByIndexErr.
package fields

import "reflect"

// Alloc returns the field of v (addressable) at index. It allocates nil
// embedded pointers on the way. It returns false when one cannot be set:
// an embedded pointer to an unexported type.
func Alloc(v reflect.Value, index []int) (reflect.Value, bool) {
	if len(index) == 1 {
		return v.Field(index[0]), true
	}
	for i, x := range index {
		if i > 0 && v.Kind() == reflect.Pointer {
			if v.IsNil() {
				if !v.CanSet() {
					return reflect.Value{}, false
				}
				v.Set(reflect.New(v.Type().Elem()))
			}
			v = v.Elem()
		}
		v = v.Field(x)
	}
	return v, true
}
