package rpcschema

import (
	"encoding"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/sundial-go/sundial/operations"
)

// This file derives protobuf message descriptors from the Go types of the
// registered operations. The rules (documented in docs/grpc.md):
//
//   - a struct is a message named after the Go type (anonymous structs are
//     named after their method or parent field); an anonymous struct{} is
//     google.protobuf.Empty;
//   - each exported field (or json-tagged name) is a proto field with that
//     name, both as the field name and as its JSON name; json:"-" skips it;
//     embedded structs are flattened as encoding/json does;
//   - field numbers follow declaration order, from 1, unless a field has a
//     `proto:"N"` tag;
//   - string, bool, int/int64, int8/16/32, uint/uint64, uint8/16/32,
//     float32, float64 and []byte map to string, bool, int64, int32,
//     uint64, uint32, float, double and bytes; time.Time and time.Duration to
//     google.protobuf.Timestamp and Duration; a pointer to a scalar is a
//     proto3 optional field; a pointer to a struct is a message field; a
//     slice is a repeated field; map[string]V is map<string, V>;
//   - anything else (interfaces, channels, functions, arrays, complex
//     numbers, maps with other keys, slices of slices, types with custom
//     JSON or text marshalling) is rejected by New with an error naming the
//     operation and the field.

// valueKind is how one Go value converts to one protobuf value.
type valueKind uint8

const (
	vString valueKind = iota
	vBool
	vInt
	vUint
	vFloat
	vBytes
	vTime
	vDuration
	vMessage
)

// cardinality is the shape of a field.
type cardinality uint8

const (
	cSingle   cardinality = iota // T or *struct
	cOptional                    // *scalar: proto3 optional
	cList                        // []T
	cMap                         // map[string]T
)

// valueCodec converts one element: a scalar, a well-known type or a
// message.
type valueCodec struct {
	kind  valueKind
	ptr   bool // the Go element is a pointer (*struct, *time.Time)
	bits  int  // 32 or 64 for numbers
	msg   *messageCodec
	gtype reflect.Type // the Go element type, dereferenced
}

// fieldCodec is one proto field of a message and where it lives in the Go
// struct.
type fieldCodec struct {
	name   string
	goName string
	index  []int // path through embedded structs (reflect.Value.FieldByIndex)
	number int32
	card   cardinality
	elem   valueCodec
	ftype  reflect.Type // the Go field type
	fd     protoreflect.FieldDescriptor
}

// messageCodec converts one Go struct type to and from one message.
type messageCodec struct {
	goType reflect.Type
	name   string // simple name within the package
	full   string // fully qualified name
	empty  bool   // google.protobuf.Empty
	rpc    bool   // the request or response of one method (rpcMessage)
	fields []fieldCodec
	desc   protoreflect.MessageDescriptor
}

var (
	timeType     = reflect.TypeFor[time.Time]()
	durationType = reflect.TypeFor[time.Duration]()
	emptyStruct  = reflect.TypeFor[struct{}]()

	jsonMarshaler = reflect.TypeFor[json.Marshaler]()
	textMarshaler = reflect.TypeFor[encoding.TextMarshaler]()
)

const (
	fileTimestamp = "google/protobuf/timestamp.proto"
	fileDuration  = "google/protobuf/duration.proto"
	fileEmpty     = "google/protobuf/empty.proto"
)

// schema accumulates the messages of one application package.
type schema struct {
	pkg    string
	byType map[reflect.Type]*messageCodec
	byName map[string]*messageCodec
	protos []*descriptorpb.DescriptorProto
	deps   map[string]bool // well-known files the messages import
	empty  *messageCodec
	rpcs   []*messageCodec // the request and response messages (rpcMessage)
	// rules describes the fields' validate tags in comments: any
	// operation of the registry (they share its rules); nil: built-in.
	rules *operations.Descriptor
	locs  []*descriptorpb.SourceCodeInfo_Location // the fields' comments
}

func newSchema(pkg string) *schema {
	return &schema{
		pkg:    pkg,
		byType: make(map[reflect.Type]*messageCodec),
		byName: make(map[string]*messageCodec),
		deps:   make(map[string]bool),
	}
}

// schemaError is a type the schema cannot express. where names the
// operation and the field.
func schemaError(where, format string, args ...any) error {
	return fmt.Errorf("%s: %s", where, fmt.Sprintf(format, args...))
}

// topMessage returns the codec of an operation's input or output type t.
// hint names t's message when t is an anonymous struct.
func (s *schema) topMessage(t reflect.Type, hint, where string) (*messageCodec, error) {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == emptyStruct {
		if s.empty == nil {
			s.empty = &messageCodec{goType: emptyStruct, name: "Empty", full: "google.protobuf.Empty", empty: true}
		}
		return s.empty, nil
	}
	if t.Kind() != reflect.Struct || t == timeType {
		return nil, schemaError(where, "type %v is not a struct; gRPC messages are structs", t)
	}
	return s.message(t, hint, where)
}

// rpcMessage returns the codec of the request or response message of one
// method. It is a message named name (e.g. "ChargeRequest") with the
// fields of Go type t. It is not shared with other methods or with fields
// of type t, which use t's own message. So every method has its own
// request and response types, as protoc style guides and buf lint ask.
// struct{} stays google.protobuf.Empty.
func (s *schema) rpcMessage(t reflect.Type, name, where string) (*messageCodec, error) {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == emptyStruct {
		return s.topMessage(t, name, where)
	}
	if t.Kind() != reflect.Struct || t == timeType {
		return nil, schemaError(where, "type %v is not a struct; gRPC messages are structs", t)
	}
	if err := checkMarshalers(t, where); err != nil {
		return nil, err
	}
	if other, ok := s.byName[name]; ok {
		return nil, schemaError(where, "message %s.%s is the request or response of one method and would also describe %v (%s); rename that Go type or set GRPCService/GRPCMethod",
			s.pkg, name, other.goType, other.goType.PkgPath())
	}
	mc := &messageCodec{goType: t, name: name, full: s.pkg + "." + name, rpc: true}
	s.byName[name] = mc
	s.rpcs = append(s.rpcs, mc)
	return s.fill(mc, where)
}

// message returns the codec of struct type t, building it on first use.
// Recursive types are fine: the codec is recorded before its fields are
// built.
func (s *schema) message(t reflect.Type, hint, where string) (*messageCodec, error) {
	if mc, ok := s.byType[t]; ok {
		return mc, nil
	}
	if err := checkMarshalers(t, where); err != nil {
		return nil, err
	}
	name := pascal(t.Name())
	if name == "" || !isIdent(name) {
		name = hint
	}
	if !isIdent(name) {
		return nil, schemaError(where, "cannot derive a message name for %v (got %q)", t, name)
	}
	if other, ok := s.byName[name]; ok && other.rpc {
		return nil, schemaError(where, "message %s.%s, built from Go type %v, has the name of the request or response message of a method; rename the Go type or set GRPCService/GRPCMethod",
			s.pkg, name, t)
	} else if ok {
		return nil, schemaError(where, "message %s.%s would describe both %v (%s) and %v (%s); rename one of the Go types",
			s.pkg, name, other.goType, other.goType.PkgPath(), t, t.PkgPath())
	}
	mc := &messageCodec{goType: t, name: name, full: s.pkg + "." + name}
	s.byType[t] = mc
	s.byName[name] = mc
	return s.fill(mc, where)
}

// fill builds the fields of mc from its Go type and its descriptor.
func (s *schema) fill(mc *messageCodec, where string) (*messageCodec, error) {
	t := mc.goType
	var fields []fieldCodec
	if err := s.collect(t, nil, where, mc.name, &fields, map[reflect.Type]bool{t: true}); err != nil {
		return nil, err
	}
	if err := numberFields(fields, where); err != nil {
		return nil, err
	}
	mc.fields = fields
	s.comment(mc, int32(len(s.protos)))
	s.protos = append(s.protos, s.describe(mc))
	return mc, nil
}

// collect appends the fields of struct t (flattening embedded structs) to
// out. index is the path from the top struct; embedding guards against
// embedding cycles.
func (s *schema) collect(t reflect.Type, index []int, where, msgName string, out *[]fieldCodec, embedding map[reflect.Type]bool) error {
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		idx := append(append([]int(nil), index...), i)
		if et, ok := embeddedStruct(f, name); ok {
			if err := s.collectEmbedded(f, et, idx, where, msgName, out, embedding); err != nil {
				return err
			}
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		fc, err := s.newField(f, name, idx, where+" field "+msgName+"."+name, msgName, *out)
		if err != nil {
			return err
		}
		*out = append(*out, fc)
	}
	return nil
}

// embeddedStruct returns the struct type of f when f is an embedded struct
// (or pointer to one) without a json name, whose fields are flattened.
func embeddedStruct(f reflect.StructField, name string) (reflect.Type, bool) {
	if !f.Anonymous || name != "" {
		return nil, false
	}
	et := f.Type
	if et.Kind() == reflect.Pointer {
		et = et.Elem()
	}
	return et, et.Kind() == reflect.Struct && et != timeType
}

// collectEmbedded appends the fields of the embedded struct et (the type
// of field f) to out, as collect does.
func (s *schema) collectEmbedded(f reflect.StructField, et reflect.Type, idx []int, where, msgName string, out *[]fieldCodec, embedding map[reflect.Type]bool) error {
	ewhere := where + " " + msgName + "." + f.Name
	if f.Type.Kind() == reflect.Pointer && !f.IsExported() {
		return schemaError(ewhere, "embedded pointer to unexported struct %v cannot be filled in; embed the struct by value", et)
	}
	if embedding[et] {
		return schemaError(ewhere, "embedding cycle through %v", et)
	}
	if err := checkMarshalers(et, ewhere); err != nil {
		return err
	}
	embedding[et] = true
	err := s.collect(et, idx, where, msgName, out, embedding)
	delete(embedding, et)
	return err
}

// newField returns the codec of the exported struct field f, named name,
// at index idx; prev are the message's fields so far. fwhere names the
// field in errors.
func (s *schema) newField(f reflect.StructField, name string, idx []int, fwhere, msgName string, prev []fieldCodec) (fieldCodec, error) {
	if !isIdent(name) {
		return fieldCodec{}, schemaError(fwhere, "name %q is not a protobuf identifier (letters, digits and '_', not starting with a digit); change its json tag", name)
	}
	for _, p := range prev {
		if p.name == name {
			return fieldCodec{}, schemaError(fwhere, "the name %q is used by two fields (%s and %s)", name, p.goName, f.Name)
		}
	}
	fc := fieldCodec{name: name, goName: f.Name, index: idx, ftype: f.Type}
	if n := f.Tag.Get("proto"); n != "" {
		v, err := strconv.ParseInt(n, 10, 32)
		if err != nil || v < 1 || v > 536870911 || (v >= 19000 && v <= 19999) {
			return fieldCodec{}, schemaError(fwhere, "proto tag %q is not a valid field number (1 to 536870911, not 19000-19999)", n)
		}
		fc.number = int32(v)
	}
	if err := s.fieldShape(&fc, msgName, fwhere); err != nil {
		return fieldCodec{}, err
	}
	return fc, nil
}

// numberFields gives fields without a proto tag the lowest free numbers, in
// declaration order.
func numberFields(fields []fieldCodec, where string) error {
	used := make(map[int32]string, len(fields))
	for _, f := range fields {
		if f.number == 0 {
			continue
		}
		if other, dup := used[f.number]; dup {
			return schemaError(where, "fields %s and %s both have proto number %d", other, f.name, f.number)
		}
		used[f.number] = f.name
	}
	next := int32(1)
	for i := range fields {
		if fields[i].number != 0 {
			continue
		}
		for used[next] != "" {
			next++
		}
		fields[i].number = next
		used[next] = fields[i].name
	}
	return nil
}

// fieldShape classifies the Go type of one field.
func (s *schema) fieldShape(fc *fieldCodec, msgName, where string) error {
	card, t, err := shapeOf(fc.ftype, where)
	if err != nil {
		return err
	}
	fc.card = card
	ptr := false
	if card != cOptional && t.Kind() == reflect.Pointer {
		ptr = true
		t = t.Elem()
		if t.Kind() != reflect.Struct && t != durationType {
			return schemaError(where, "type %v: pointers are allowed only to structs or, as an optional field, to scalars", fc.ftype)
		}
	}
	vc, err := s.element(t, msgName+pascal(fc.name), where)
	if err != nil {
		return err
	}
	vc.ptr = ptr
	if card == cOptional && vc.kind == vMessage {
		return schemaError(where, "type %v: pointers are allowed only to structs or, as an optional field, to scalars", fc.ftype)
	}
	fc.elem = vc
	return nil
}

// shapeOf returns the cardinality of a field of Go type ft and the type of
// its elements: the slice's or map's element, the scalar an optional
// field points to, or ft itself.
func shapeOf(ft reflect.Type, where string) (cardinality, reflect.Type, error) {
	switch {
	case ft == timeType || ft == durationType:
		return cSingle, ft, nil
	case ft.Kind() == reflect.Pointer:
		if e := ft.Elem(); e.Kind() != reflect.Struct && e != durationType {
			return cOptional, e, nil
		}
		return cSingle, ft, nil
	case ft.Kind() == reflect.Slice && ft.Elem().Kind() != reflect.Uint8:
		if nested(ft.Elem()) {
			return 0, nil, schemaError(where, "type %v: repeated fields cannot hold slices or maps", ft)
		}
		return cList, ft.Elem(), nil
	case ft.Kind() == reflect.Map:
		if ft.Key().Kind() != reflect.String {
			return 0, nil, schemaError(where, "type %v: only maps with string keys are supported", ft)
		}
		if nested(ft.Elem()) {
			return 0, nil, schemaError(where, "type %v: map values cannot be slices or maps", ft)
		}
		return cMap, ft.Elem(), nil
	}
	return cSingle, ft, nil
}

// nested reports whether t is a slice (other than []byte) or a map, which
// a repeated field or a map value cannot hold.
func nested(t reflect.Type) bool {
	k := t.Kind()
	return (k == reflect.Slice && t.Elem().Kind() != reflect.Uint8) || k == reflect.Map
}

// scalarKinds maps the Go kinds of scalars to their value kind and size.
var scalarKinds = map[reflect.Kind]struct {
	kind valueKind
	bits int
}{
	reflect.String:  {vString, 0},
	reflect.Bool:    {vBool, 0},
	reflect.Int:     {vInt, 64},
	reflect.Int64:   {vInt, 64},
	reflect.Int8:    {vInt, 32},
	reflect.Int16:   {vInt, 32},
	reflect.Int32:   {vInt, 32},
	reflect.Uint:    {vUint, 64},
	reflect.Uint64:  {vUint, 64},
	reflect.Uint8:   {vUint, 32},
	reflect.Uint16:  {vUint, 32},
	reflect.Uint32:  {vUint, 32},
	reflect.Float32: {vFloat, 32},
	reflect.Float64: {vFloat, 64},
}

// element classifies a non-pointer element type.
func (s *schema) element(t reflect.Type, hint, where string) (valueCodec, error) {
	vc := valueCodec{gtype: t}
	switch t {
	case timeType:
		vc.kind = vTime
		s.deps[fileTimestamp] = true
		return vc, nil
	case durationType:
		vc.kind = vDuration
		s.deps[fileDuration] = true
		return vc, nil
	}
	if err := checkMarshalers(t, where); err != nil {
		return vc, err
	}
	if sk, ok := scalarKinds[t.Kind()]; ok {
		vc.kind, vc.bits = sk.kind, sk.bits
		return vc, nil
	}
	switch t.Kind() {
	case reflect.Slice:
		if t.Elem().Kind() != reflect.Uint8 {
			return vc, schemaError(where, "type %v is not supported", t)
		}
		vc.kind = vBytes
	case reflect.Struct:
		mc, err := s.message(t, hint, where)
		if err != nil {
			return vc, err
		}
		vc.kind, vc.msg = vMessage, mc
	default:
		return vc, schemaError(where, "type %v is not supported (see docs/grpc.md for the supported Go types)", t)
	}
	return vc, nil
}

// checkMarshalers rejects types whose JSON form is custom: the HTTP
// adapter would encode them differently from their Go structure, so one
// registration would not mean the same over both protocols.
func checkMarshalers(t reflect.Type, where string) error {
	if t == timeType || t == durationType {
		return nil
	}
	for _, m := range []reflect.Type{jsonMarshaler, textMarshaler} {
		if t.Implements(m) || reflect.PointerTo(t).Implements(m) {
			return schemaError(where, "type %v implements %v; its wire form cannot be derived from its Go structure", t, m)
		}
	}
	return nil
}

// comment records the constraints of each field's validate tag as the
// field's leading comment: "Constraints: required; at most 100
// characters." The fields are those of mc, message number msg of the file.
// So the schema reflection exports shows them, as the OpenAPI document
// does.
func (s *schema) comment(mc *messageCodec, msg int32) {
	for i, f := range mc.fields {
		sf := mc.goType.FieldByIndex(f.index)
		rules, mustGive := s.rules.FieldRules(sf)
		text := rules.String()
		if mustGive && !strings.HasPrefix(text, "required") {
			text = strings.TrimSuffix("must be given; "+text, "; ")
		}
		if text == "" {
			continue
		}
		s.locs = append(s.locs, &descriptorpb.SourceCodeInfo_Location{
			Path:            []int32{4, msg, 2, int32(i)}, // message_type[msg].field[i]
			Span:            []int32{0, 0, 0},
			LeadingComments: new(" Constraints: " + text + ".\n"),
		})
	}
}

// describe returns the DescriptorProto of a built message codec.
func (s *schema) describe(mc *messageCodec) *descriptorpb.DescriptorProto {
	dp := &descriptorpb.DescriptorProto{Name: new(mc.name)}
	for i := range mc.fields {
		f := &mc.fields[i]
		fp := &descriptorpb.FieldDescriptorProto{
			Name:     new(f.name),
			JsonName: new(f.name),
			Number:   new(f.number),
			Label:    descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(),
		}
		setType(fp, f.elem)
		switch f.card {
		case cList:
			fp.Label = descriptorpb.FieldDescriptorProto_LABEL_REPEATED.Enum()
		case cOptional:
			fp.Proto3Optional = new(true)
			fp.OneofIndex = new(int32(len(dp.OneofDecl)))
			dp.OneofDecl = append(dp.OneofDecl, &descriptorpb.OneofDescriptorProto{Name: new("_" + f.name)})
		case cMap:
			entry := mapEntryName(f.name)
			key := &descriptorpb.FieldDescriptorProto{
				Name: new("key"), JsonName: new("key"), Number: new(int32(1)),
				Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(),
				Type:  descriptorpb.FieldDescriptorProto_TYPE_STRING.Enum(),
			}
			val := &descriptorpb.FieldDescriptorProto{
				Name: new("value"), JsonName: new("value"), Number: new(int32(2)),
				Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(),
			}
			setType(val, f.elem)
			dp.NestedType = append(dp.NestedType, &descriptorpb.DescriptorProto{
				Name:    new(entry),
				Field:   []*descriptorpb.FieldDescriptorProto{key, val},
				Options: &descriptorpb.MessageOptions{MapEntry: new(true)},
			})
			fp.Label = descriptorpb.FieldDescriptorProto_LABEL_REPEATED.Enum()
			fp.Type = descriptorpb.FieldDescriptorProto_TYPE_MESSAGE.Enum()
			fp.TypeName = new("." + mc.full + "." + entry)
		}
		dp.Field = append(dp.Field, fp)
	}
	// Synthetic oneofs of proto3 optional fields must follow real ones;
	// there are no real ones, so declaration order is fine.
	return dp
}

// scalarTypes are the proto types of the scalar kinds: 64-bit, then
// 32-bit.
var scalarTypes = map[valueKind][2]descriptorpb.FieldDescriptorProto_Type{
	vString: {descriptorpb.FieldDescriptorProto_TYPE_STRING, descriptorpb.FieldDescriptorProto_TYPE_STRING},
	vBool:   {descriptorpb.FieldDescriptorProto_TYPE_BOOL, descriptorpb.FieldDescriptorProto_TYPE_BOOL},
	vInt:    {descriptorpb.FieldDescriptorProto_TYPE_INT64, descriptorpb.FieldDescriptorProto_TYPE_INT32},
	vUint:   {descriptorpb.FieldDescriptorProto_TYPE_UINT64, descriptorpb.FieldDescriptorProto_TYPE_UINT32},
	vFloat:  {descriptorpb.FieldDescriptorProto_TYPE_DOUBLE, descriptorpb.FieldDescriptorProto_TYPE_FLOAT},
	vBytes:  {descriptorpb.FieldDescriptorProto_TYPE_BYTES, descriptorpb.FieldDescriptorProto_TYPE_BYTES},
}

func setType(fp *descriptorpb.FieldDescriptorProto, vc valueCodec) {
	t := descriptorpb.FieldDescriptorProto_TYPE_MESSAGE
	switch vc.kind {
	case vTime:
		fp.TypeName = new(".google.protobuf.Timestamp")
	case vDuration:
		fp.TypeName = new(".google.protobuf.Duration")
	case vMessage:
		fp.TypeName = new("." + vc.msg.full)
	default:
		pair := scalarTypes[vc.kind]
		t = pair[0]
		if vc.bits == 32 {
			t = pair[1]
		}
	}
	fp.Type = t.Enum()
}

// mapEntryName is protoc's name for a map field's entry message:
// "by_name" -> "ByNameEntry".
func mapEntryName(field string) string {
	var b strings.Builder
	up := true
	for i := 0; i < len(field); i++ {
		c := field[i]
		switch {
		case c == '_':
			up = true
		case up:
			if c >= 'a' && c <= 'z' {
				c -= 'a' - 'A'
			}
			b.WriteByte(c)
			up = false
		default:
			b.WriteByte(c)
		}
	}
	return b.String() + "Entry"
}

// pascal upper-cases the first letter of s.
func pascal(s string) string {
	if s == "" || s[0] < 'a' || s[0] > 'z' {
		return s
	}
	return string(s[0]-('a'-'A')) + s[1:]
}

// isIdent reports whether s is a protobuf identifier.
func isIdent(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c == '_':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}
