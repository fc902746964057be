package main

import (
	"reflect"
	"strconv"

	"google.golang.org/protobuf/encoding/protowire"
)

// marshal returns the binary protobuf form of v, a struct of this
// package's message types, by their proto tags. The server echoes the
// requests it received in this form.
func marshal(v any) []byte {
	return appendStruct(nil, reflect.ValueOf(v))
}

func appendStruct(b []byte, v reflect.Value) []byte {
	t := v.Type()
	for i := range t.NumField() {
		n, err := strconv.Atoi(t.Field(i).Tag.Get("proto"))
		if err != nil {
			continue
		}
		b = appendField(b, protowire.Number(n), v.Field(i))
	}
	return b
}

func appendField(b []byte, n protowire.Number, f reflect.Value) []byte {
	switch f.Kind() {
	case reflect.String:
		if f.Len() > 0 {
			b = protowire.AppendTag(b, n, protowire.BytesType)
			b = protowire.AppendString(b, f.String())
		}
	case reflect.Bool:
		if f.Bool() {
			b = protowire.AppendTag(b, n, protowire.VarintType)
			b = protowire.AppendVarint(b, 1)
		}
	case reflect.Int32, reflect.Int64:
		if f.Int() != 0 {
			b = protowire.AppendTag(b, n, protowire.VarintType)
			b = protowire.AppendVarint(b, uint64(f.Int()))
		}
	case reflect.Uint32, reflect.Uint64:
		if f.Uint() != 0 {
			b = protowire.AppendTag(b, n, protowire.VarintType)
			b = protowire.AppendVarint(b, f.Uint())
		}
	case reflect.Pointer:
		if f.IsNil() {
			return b
		}
		if e := f.Elem(); e.Kind() == reflect.Struct {
			b = protowire.AppendTag(b, n, protowire.BytesType)
			b = protowire.AppendBytes(b, appendStruct(nil, e))
		} else {
			b = appendPresent(b, n, e)
		}
	case reflect.Struct:
		b = protowire.AppendTag(b, n, protowire.BytesType)
		b = protowire.AppendBytes(b, appendStruct(nil, f))
	case reflect.Slice:
		if f.Type().Elem().Kind() == reflect.Uint8 {
			if f.Len() > 0 {
				b = protowire.AppendTag(b, n, protowire.BytesType)
				b = protowire.AppendBytes(b, f.Bytes())
			}
			return b
		}
		for j := range f.Len() {
			b = appendPresent(b, n, f.Index(j))
		}
	}
	return b
}

// appendPresent appends v even when it is its zero value: an element of
// a repeated field, or an optional field that is set.
func appendPresent(b []byte, n protowire.Number, v reflect.Value) []byte {
	switch v.Kind() {
	case reflect.String:
		b = protowire.AppendTag(b, n, protowire.BytesType)
		return protowire.AppendString(b, v.String())
	case reflect.Int32, reflect.Int64:
		b = protowire.AppendTag(b, n, protowire.VarintType)
		return protowire.AppendVarint(b, uint64(v.Int()))
	case reflect.Slice: // bytes
		b = protowire.AppendTag(b, n, protowire.BytesType)
		return protowire.AppendBytes(b, v.Bytes())
	}
	return appendField(b, n, v)
}
