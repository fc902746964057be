package rpcschema

import (
	"fmt"
	"math"
	"reflect"
	"strings"
	"time"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/sundial-go/sundial/adapters/internal/fields"
)

// encode writes the Go struct v into the empty message m. Zero scalars,
// nil pointers, empty slices and maps, and zero structs are left unset,
// as proto3 does for its own zero values.
func (mc *messageCodec) encode(v reflect.Value, m protoreflect.Message) {
	for i := range mc.fields {
		f := &mc.fields[i]
		fv, err := v.FieldByIndexErr(f.index) // an error: a nil embedded pointer on the way
		if err != nil || fv.IsZero() {
			continue
		}
		switch f.card {
		case cSingle:
			if f.elem.isMessage() {
				f.elem.encodeMessage(fv, m.Mutable(f.fd).Message())
				continue
			}
			m.Set(f.fd, f.elem.scalar(fv))
		case cOptional:
			m.Set(f.fd, f.elem.scalar(fv.Elem()))
		case cList:
			l := m.Mutable(f.fd).List()
			for j := range fv.Len() {
				ev := fv.Index(j)
				if f.elem.isMessage() {
					sub := l.NewElement()
					f.elem.encodeMessage(ev, sub.Message())
					l.Append(sub)
					continue
				}
				l.Append(f.elem.scalar(ev))
			}
		case cMap:
			mp := m.Mutable(f.fd).Map()
			it := fv.MapRange()
			for it.Next() {
				key := protoreflect.ValueOfString(it.Key().String()).MapKey()
				if f.elem.isMessage() {
					sub := mp.NewValue()
					f.elem.encodeMessage(it.Value(), sub.Message())
					mp.Set(key, sub)
					continue
				}
				mp.Set(key, f.elem.scalar(it.Value()))
			}
		}
	}
}

func (vc *valueCodec) isMessage() bool {
	return vc.kind == vMessage || vc.kind == vTime || vc.kind == vDuration
}

// encodeMessage writes v (a struct, time.Time, time.Duration, or a pointer
// to one; a nil pointer leaves m empty) into m.
func (vc *valueCodec) encodeMessage(v reflect.Value, m protoreflect.Message) {
	if vc.ptr {
		if v.IsNil() {
			return
		}
		v = v.Elem()
	}
	switch vc.kind {
	case vTime:
		t := v.Interface().(time.Time)
		setSecondsNanos(m, t.Unix(), int32(t.Nanosecond()))
	case vDuration:
		d := time.Duration(v.Int())
		setSecondsNanos(m, int64(d/time.Second), int32(d%time.Second))
	default:
		vc.msg.encode(v, m)
	}
}

// setSecondsNanos fills a google.protobuf.Timestamp or Duration (field 1
// seconds, field 2 nanos).
func setSecondsNanos(m protoreflect.Message, s int64, n int32) {
	fs := m.Descriptor().Fields()
	if s != 0 {
		m.Set(fs.ByNumber(1), protoreflect.ValueOfInt64(s))
	}
	if n != 0 {
		m.Set(fs.ByNumber(2), protoreflect.ValueOfInt32(n))
	}
}

// scalar converts a Go scalar to its protobuf value.
func (vc *valueCodec) scalar(v reflect.Value) protoreflect.Value {
	switch vc.kind {
	case vString:
		return protoreflect.ValueOfString(v.String())
	case vBool:
		return protoreflect.ValueOfBool(v.Bool())
	case vInt:
		if vc.bits == 32 {
			return protoreflect.ValueOfInt32(int32(v.Int()))
		}
		return protoreflect.ValueOfInt64(v.Int())
	case vUint:
		if vc.bits == 32 {
			return protoreflect.ValueOfUint32(uint32(v.Uint()))
		}
		return protoreflect.ValueOfUint64(v.Uint())
	case vFloat:
		if vc.bits == 32 {
			return protoreflect.ValueOfFloat32(float32(v.Float()))
		}
		return protoreflect.ValueOfFloat64(v.Float())
	case vBytes:
		return protoreflect.ValueOfBytes(v.Bytes())
	}
	panic("rpcschema: scalar of a message kind") // unreachable: kinds are fixed by the schema
}

// fieldError is a value that does not fit its Go field; path is built
// outermost-last while the error travels up.
type fieldError struct {
	path []string
	msg  string
}

func (e *fieldError) Error() string {
	return fmt.Sprintf("field '%s': %s", e.Path(), e.msg)
}

// Path returns the dotted field path, outermost first.
func (e *fieldError) Path() string {
	var b strings.Builder
	for i := len(e.path) - 1; i >= 0; i-- {
		b.WriteString(e.path[i])
		if i > 0 && !strings.HasPrefix(e.path[i-1], "[") {
			b.WriteByte('.')
		}
	}
	return b.String()
}

func within(err error, name string) error {
	if fe, ok := err.(*fieldError); ok {
		fe.path = append(fe.path, name)
	}
	return err
}

// decode fills the zero Go struct v (addressable) from m. Absent fields
// stay zero. It fails only when a value does not fit its Go type (an
// integer overflow, an out-of-range timestamp).
func (mc *messageCodec) decode(m protoreflect.Message, v reflect.Value) error {
	for i := range mc.fields {
		f := &mc.fields[i]
		if !m.Has(f.fd) {
			continue
		}
		fv, ok := fields.Alloc(v, f.index)
		if !ok {
			continue
		}
		if err := f.decode(m.Get(f.fd), fv); err != nil {
			return within(err, f.name)
		}
	}
	return nil
}

// decode fills the Go field fv from the field's protobuf value pv.
func (f *fieldCodec) decode(pv protoreflect.Value, fv reflect.Value) error {
	switch f.card {
	case cSingle:
		return f.elem.decodeValue(pv, fv)
	case cOptional:
		p := reflect.New(fv.Type().Elem())
		if err := f.elem.setScalar(pv, p.Elem()); err != nil {
			return err
		}
		fv.Set(p)
	case cList:
		return f.decodeList(pv.List(), fv)
	case cMap:
		return f.decodeMap(pv.Map(), fv)
	}
	return nil
}

// decodeList fills the slice field fv from l. The slice is stored even
// when an element fails, filled up to that element.
func (f *fieldCodec) decodeList(l protoreflect.List, fv reflect.Value) error {
	var err error
	s := reflect.MakeSlice(fv.Type(), l.Len(), l.Len())
	for j := range l.Len() {
		if err = f.elem.decodeValue(l.Get(j), s.Index(j)); err != nil {
			err = within(err, fmt.Sprintf("[%d]", j))
			break
		}
	}
	fv.Set(s)
	return err
}

// decodeMap fills the map field fv from mp. The map is stored even when
// a value fails, holding the entries decoded before it.
func (f *fieldCodec) decodeMap(mp protoreflect.Map, fv reflect.Value) error {
	var err error
	out := reflect.MakeMapWithSize(fv.Type(), mp.Len())
	et := fv.Type().Elem()
	mp.Range(func(k protoreflect.MapKey, pv protoreflect.Value) bool {
		ev := reflect.New(et).Elem()
		if err = f.elem.decodeValue(pv, ev); err != nil {
			err = within(err, fmt.Sprintf("[%q]", k.String()))
			return false
		}
		kv := reflect.New(fv.Type().Key()).Elem()
		kv.SetString(k.String())
		out.SetMapIndex(kv, ev)
		return true
	})
	fv.Set(out)
	return err
}

// decodeValue fills v from the element pv, a message or a scalar.
func (vc *valueCodec) decodeValue(pv protoreflect.Value, v reflect.Value) error {
	if vc.isMessage() {
		return vc.decodeMessage(pv.Message(), v)
	}
	return vc.setScalar(pv, v)
}

// decodeMessage fills v (a struct, time.Time, time.Duration or a pointer to
// one) from m.
func (vc *valueCodec) decodeMessage(m protoreflect.Message, v reflect.Value) error {
	if vc.ptr {
		p := reflect.New(vc.gtype)
		v.Set(p)
		v = p.Elem()
	}
	switch vc.kind {
	case vTime:
		t, err := decodeTime(m)
		if err != nil {
			return err
		}
		v.Set(reflect.ValueOf(t))
	case vDuration:
		d, err := decodeDuration(m)
		if err != nil {
			return err
		}
		v.SetInt(int64(d))
	default:
		return vc.msg.decode(m, v)
	}
	return nil
}

// decodeTime returns the time of the google.protobuf.Timestamp m, in UTC.
func decodeTime(m protoreflect.Message) (time.Time, error) {
	s, n := secondsNanos(m)
	// The range of google.protobuf.Timestamp: 0001-01-01 to 9999-12-31.
	if s < -62135596800 || s > 253402300799 || n < 0 || n > 999999999 {
		return time.Time{}, &fieldError{msg: fmt.Sprintf("timestamp {seconds: %d, nanos: %d} is out of range", s, n)}
	}
	return time.Unix(s, int64(n)).UTC(), nil
}

// decodeDuration returns the duration of the google.protobuf.Duration m.
func decodeDuration(m protoreflect.Message) (time.Duration, error) {
	s, n := secondsNanos(m)
	if n <= -1e9 || n >= 1e9 || (s > 0 && n < 0) || (s < 0 && n > 0) ||
		s > math.MaxInt64/int64(time.Second) || s < math.MinInt64/int64(time.Second) {
		return 0, &fieldError{msg: fmt.Sprintf("duration {seconds: %d, nanos: %d} is out of range", s, n)}
	}
	return time.Duration(s*int64(time.Second) + int64(n)), nil
}

// secondsNanos returns the seconds and nanos fields of a Timestamp or
// Duration message.
func secondsNanos(m protoreflect.Message) (int64, int32) {
	fs := m.Descriptor().Fields()
	return m.Get(fs.ByNumber(1)).Int(), int32(m.Get(fs.ByNumber(2)).Int())
}

// setScalar stores a protobuf scalar into the Go value v.
func (vc *valueCodec) setScalar(pv protoreflect.Value, v reflect.Value) error {
	switch vc.kind {
	case vString:
		v.SetString(pv.String())
	case vBool:
		v.SetBool(pv.Bool())
	case vInt:
		x := pv.Int()
		if v.OverflowInt(x) {
			return &fieldError{msg: fmt.Sprintf("value %d overflows %v", x, v.Type())}
		}
		v.SetInt(x)
	case vUint:
		x := pv.Uint()
		if v.OverflowUint(x) {
			return &fieldError{msg: fmt.Sprintf("value %d overflows %v", x, v.Type())}
		}
		v.SetUint(x)
	case vFloat:
		v.SetFloat(pv.Float())
	case vBytes:
		b := pv.Bytes()
		v.SetBytes(append(make([]byte, 0, len(b)), b...))
	}
	return nil
}
