package rpcschema

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
)

type level string

type address struct {
	Street string  `json:"street"`
	Zip    *string `json:"zip,omitempty"`
}

type Stamped struct {
	CreatedAt time.Time `json:"createdAt"`
	Note      string    `json:"note"`
}

type bytesAlias []byte

// rich exercises every supported shape.
type rich struct {
	Stamped
	Name     string             `json:"name"`
	Count    int                `json:"count"`
	Small    int8               `json:"small"`
	I32      int32              `json:"i32"`
	Big      uint64             `json:"big"`
	U16      uint16             `json:"u16"`
	Ratio    float64            `json:"ratio"`
	F32      float32            `json:"f32"`
	On       bool               `json:"on"`
	Level    level              `json:"level"`
	Data     []byte             `json:"data"`
	Alias    bytesAlias         `json:"alias"`
	Tags     []string           `json:"tags"`
	Nums     []int              `json:"nums"`
	Home     address            `json:"home"`
	Work     *address           `json:"work"`
	Others   []address          `json:"others"`
	Ptrs     []*address         `json:"ptrs"`
	ByName   map[string]address `json:"byName"`
	Counts   map[string]int     `json:"counts"`
	Maybe    *int               `json:"maybe"`
	MaybeOff *bool              `json:"maybeOff"`
	When     *time.Time         `json:"when"`
	Times    []time.Time        `json:"times"`
	Children []rich             `json:"children"`
	Skipped  string             `json:"-"`
	hidden   int
	Pinned   string `json:"pinned" proto:"100"`
	Plain    string
}

// withDuration holds the one type whose JSON differs between encoding/json
// (nanoseconds) and protojson ("1.5s").
type withDuration struct {
	Wait  time.Duration  `json:"wait"`
	Limit *time.Duration `json:"limit"`
}

// flat is a small flat message, like the shop's orders.
type flat struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	Amount int    `json:"amount"`
}

func newTestAdapter(t testing.TB) *Set {
	t.Helper()
	reg := operations.NewRegistry()
	flatEcho := func(_ context.Context, in flat) (flat, error) { return in, nil }
	if err := operations.Register(reg, operations.Descriptor{ID: "echo.flat"}, flatEcho); err != nil {
		t.Fatal(err)
	}
	echo := func(_ context.Context, in rich) (rich, error) { return in, nil }
	if err := operations.Register(reg, operations.Descriptor{ID: "echo.rich"}, echo); err != nil {
		t.Fatal(err)
	}
	dur := func(_ context.Context, in withDuration) (withDuration, error) { return in, nil }
	if err := operations.Register(reg, operations.Descriptor{ID: "echo.wait"}, dur); err != nil {
		t.Fatal(err)
	}
	k, err := kernel.New(kernel.WithRegistry(reg))
	if err != nil {
		t.Fatal(err)
	}
	set, err := Build(k.Operations(), "test.v1", "")
	if err != nil {
		t.Fatal(err)
	}
	return set
}

func sampleRich() rich {
	zip, n, off := "75001", 0, false
	when := time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC)
	return rich{
		Stamped: Stamped{CreatedAt: time.Date(2026, 3, 1, 12, 0, 2, 500_000_000, time.UTC), Note: "embedded"},
		Name:    "widget", Count: -1 << 40, Small: -128, I32: 1 << 30, Big: 1<<64 - 1, U16: 65535,
		Ratio: 0.25, F32: 1.5, On: true, Level: "gold",
		Data: []byte{0, 1, 2, 255}, Alias: bytesAlias("ab"),
		Tags: []string{"a", "", "c"}, Nums: []int{0, -3},
		Home:   address{Street: "Main", Zip: &zip},
		Work:   &address{},
		Others: []address{{Street: "x"}, {}},
		Ptrs:   []*address{{Street: "p"}},
		ByName: map[string]address{"k": {Street: "v"}, "": {}},
		Counts: map[string]int{"one": 1, "zero": 0},
		Maybe:  &n, MaybeOff: &off, When: &when,
		Times:    []time.Time{time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Second)},
		Children: []rich{{Name: "child", Children: []rich{{Plain: "grandchild"}}}},
		Pinned:   "pinned", Plain: "plain",
	}
}

func TestDescriptorShape(t *testing.T) {
	t.Parallel()
	a := newTestAdapter(t)
	md := a.methods["/test.v1.Echo/Rich"].in.desc
	tests := []struct {
		field  string
		kind   protoreflect.Kind
		number protoreflect.FieldNumber
		card   string // "", "repeated", "map", "optional"
		msg    protoreflect.FullName
	}{
		{"createdAt", protoreflect.MessageKind, 1, "", "google.protobuf.Timestamp"},
		{"note", protoreflect.StringKind, 2, "", ""},
		{"name", protoreflect.StringKind, 3, "", ""},
		{"count", protoreflect.Int64Kind, 4, "", ""},
		{"small", protoreflect.Int32Kind, 5, "", ""},
		{"i32", protoreflect.Int32Kind, 6, "", ""},
		{"big", protoreflect.Uint64Kind, 7, "", ""},
		{"u16", protoreflect.Uint32Kind, 8, "", ""},
		{"ratio", protoreflect.DoubleKind, 9, "", ""},
		{"f32", protoreflect.FloatKind, 10, "", ""},
		{"on", protoreflect.BoolKind, 11, "", ""},
		{"level", protoreflect.StringKind, 12, "", ""},
		{"data", protoreflect.BytesKind, 13, "", ""},
		{"alias", protoreflect.BytesKind, 14, "", ""},
		{"tags", protoreflect.StringKind, 15, "repeated", ""},
		{"home", protoreflect.MessageKind, 17, "", "test.v1.Address"},
		{"work", protoreflect.MessageKind, 18, "", "test.v1.Address"},
		{"ptrs", protoreflect.MessageKind, 20, "repeated", "test.v1.Address"},
		{"byName", protoreflect.MessageKind, 21, "map", ""},
		{"maybe", protoreflect.Int64Kind, 23, "optional", ""},
		{"when", protoreflect.MessageKind, 25, "", "google.protobuf.Timestamp"},
		{"children", protoreflect.MessageKind, 27, "repeated", "test.v1.Rich"},
		{"pinned", protoreflect.StringKind, 100, "", ""},
		{"Plain", protoreflect.StringKind, 28, "", ""},
	}
	for _, tt := range tests {
		fd := md.Fields().ByName(protoreflect.Name(tt.field))
		if fd == nil {
			t.Errorf("field %s missing from %s", tt.field, md.FullName())
			continue
		}
		card := ""
		switch {
		case fd.IsMap():
			card = "map"
		case fd.IsList():
			card = "repeated"
		case fd.HasOptionalKeyword():
			card = "optional"
		}
		var msg protoreflect.FullName
		if fd.Message() != nil && !fd.IsMap() {
			msg = fd.Message().FullName()
		}
		if fd.Kind() != tt.kind || fd.Number() != tt.number || card != tt.card || msg != tt.msg || fd.JSONName() != tt.field {
			t.Errorf("field %s = %v #%d %q %s json %q, want %v #%d %q %s json %q", tt.field,
				fd.Kind(), fd.Number(), card, msg, fd.JSONName(), tt.kind, tt.number, tt.card, tt.msg, tt.field)
		}
	}
	for _, gone := range []string{"Skipped", "hidden", "Stamped"} {
		if md.Fields().ByName(protoreflect.Name(gone)) != nil {
			t.Errorf("field %s is in %s, want it left out", gone, md.FullName())
		}
	}
	if md.Fields().Len() != 29 {
		t.Errorf("%s has %d fields, want 29", md.FullName(), md.Fields().Len())
	}
}

// roundTrip encodes v, marshals it to the wire, parses it back and decodes
// it into a new value of the same type.
func roundTrip[T any](t *testing.T, mc *messageCodec, v T) T {
	t.Helper()
	m := dynamicpb.NewMessage(mc.desc)
	mc.encode(reflect.ValueOf(v), m)
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatalf("proto.Marshal = %v", err)
	}
	back := dynamicpb.NewMessage(mc.desc)
	if err := proto.Unmarshal(b, back); err != nil {
		t.Fatalf("proto.Unmarshal = %v", err)
	}
	var out T
	if err := mc.decode(back, reflect.ValueOf(&out).Elem()); err != nil {
		t.Fatalf("decode = %v", err)
	}
	return out
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	a := newTestAdapter(t)
	mc := a.methods["/test.v1.Echo/Rich"].in
	tests := map[string]rich{"zero": {}, "full": sampleRich()}
	for name, v := range tests {
		if got := roundTrip(t, mc, v); !reflect.DeepEqual(got, stripUnsent(v)) {
			t.Errorf("%s: round trip = %+v, want %+v", name, got, stripUnsent(v))
		}
	}
	dc := a.methods["/test.v1.Echo/Wait"].in
	lim := -1500 * time.Millisecond
	for _, v := range []withDuration{{}, {Wait: 90 * time.Second, Limit: &lim}, {Wait: -time.Nanosecond}} {
		if got := roundTrip(t, dc, v); !reflect.DeepEqual(got, v) {
			t.Errorf("round trip(%+v) = %+v", v, got)
		}
	}
}

// stripUnsent clears what never travels: json:"-" and unexported fields.
func stripUnsent(v rich) rich {
	v.Skipped, v.hidden = "", 0
	return v
}

// TestJSONParity checks that a body the HTTP adapter would accept
// (encoding/json of the input) is accepted by protojson — grpcurl -d — and
// means the same value: one registration, one wire meaning.
func TestJSONParity(t *testing.T) {
	t.Parallel()
	a := newTestAdapter(t)
	mc := a.methods["/test.v1.Echo/Rich"].in
	v := sampleRich()
	body, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	m := dynamicpb.NewMessage(mc.desc)
	if err := protojson.Unmarshal(body, m); err != nil {
		t.Fatalf("protojson.Unmarshal(encoding/json body) = %v\nbody: %s", err, body)
	}
	var got rich
	if err := mc.decode(m, reflect.ValueOf(&got).Elem()); err != nil {
		t.Fatal(err)
	}
	if want := stripUnsent(v); !reflect.DeepEqual(got, want) {
		t.Errorf("decode(protojson(encoding/json(v))) = %+v, want %+v", got, want)
	}
	// And back: protojson's output, read by encoding/json, names the same
	// fields (int64 values are quoted by protojson; encoding/json reads
	// them into any as strings, so only the key sets are compared).
	out, err := protojson.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var fromProto, fromGo map[string]any
	if err := json.Unmarshal(out, &fromProto); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(body, &fromGo); err != nil {
		t.Fatal(err)
	}
	for k := range fromProto {
		if _, ok := fromGo[k]; !ok {
			t.Errorf("protojson writes field %q, which encoding/json does not know", k)
		}
	}
}

func TestDecodeErrorsNameTheField(t *testing.T) {
	t.Parallel()
	a := newTestAdapter(t)
	mc := a.methods["/test.v1.Echo/Rich"].in
	tests := []struct {
		name, json, path, msg string
	}{
		{"int8 overflow", `{"small": 128}`, "small", "value 128 overflows int8"},
		{"nested", `{"children": [{}, {"u16": 65536}]}`, "children[1].u16", "overflows uint16"},
		{"map value", `{"counts": {}, "byName": {"x": {"street": "s"}}, "children": [{"children": [{"small": -129}]}]}`, "children[0].children[0].small", "overflows int8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := dynamicpb.NewMessage(mc.desc)
			if err := protojson.Unmarshal([]byte(tt.json), m); err != nil {
				t.Fatal(err)
			}
			var out rich
			err := mc.decode(m, reflect.ValueOf(&out).Elem())
			fe, ok := err.(*fieldError)
			if !ok || fe.Path() != tt.path || !strings.Contains(fe.msg, tt.msg) {
				t.Errorf("decode(%s) = %v, want field %s: %s", tt.json, err, tt.path, tt.msg)
			}
		})
	}
}

func TestSchemaRejects(t *testing.T) {
	t.Parallel()
	type withIface struct{ X any }
	type withArray struct{ A [3]int }
	type withIntMap struct{ M map[int]string }
	type withNested struct{ S [][]int }
	type withPtrScalarList struct{ P []*int }
	type withBadName struct {
		X int `json:"x-y"`
	}
	type withDup struct {
		A int `json:"B"`
		B int
	}
	type withBadNumber struct {
		A int `proto:"19500"`
	}
	type withSameNumber struct {
		A int `proto:"2"`
		B int `proto:"2"`
	}
	type withMarshaler struct{ R json.RawMessage }
	type withComplex struct{ C complex128 }
	tests := []struct {
		typ  reflect.Type
		want string
	}{
		{reflect.TypeFor[withIface](), "field WithIface.X: type interface {} is not supported"},
		{reflect.TypeFor[withArray](), "type [3]int is not supported"},
		{reflect.TypeFor[withIntMap](), "only maps with string keys"},
		{reflect.TypeFor[withNested](), "repeated fields cannot hold slices or maps"},
		{reflect.TypeFor[withPtrScalarList](), "pointers are allowed only to structs"},
		{reflect.TypeFor[withBadName](), `name "x-y" is not a protobuf identifier`},
		{reflect.TypeFor[withDup](), `the name "B" is used by two fields (A and B)`},
		{reflect.TypeFor[withBadNumber](), `proto tag "19500" is not a valid field number`},
		{reflect.TypeFor[withSameNumber](), "both have proto number 2"},
		{reflect.TypeFor[withMarshaler](), "implements json.Marshaler"},
		{reflect.TypeFor[withComplex](), "type complex128 is not supported"},
		{reflect.TypeFor[string](), "type string is not a struct"},
	}
	for _, tt := range tests {
		_, err := newSchema("test.v1").topMessage(tt.typ, "XRequest", `operation "x.y" input`)
		if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), `operation "x.y" input`) {
			t.Errorf("topMessage(%v) = %v, want an error naming the operation and containing %q", tt.typ, err, tt.want)
		}
	}
}

func TestMessageNameCollision(t *testing.T) {
	t.Parallel()
	type address struct{ Other int } // same name as the package-level address
	s := newSchema("test.v1")
	if _, err := s.topMessage(reflect.TypeFor[rich](), "R", "a"); err != nil {
		t.Fatal(err)
	}
	_, err := s.topMessage(reflect.TypeFor[struct{ A address }](), "Wrap", `operation "b.c" input`)
	if err == nil || !strings.Contains(err.Error(), "message test.v1.Address would describe both") {
		t.Errorf("topMessage(colliding address) = %v, want a collision error", err)
	}
}

func FuzzDecode(f *testing.F) {
	a := newTestAdapter(f)
	mc := a.methods["/test.v1.Echo/Rich"].in
	m := dynamicpb.NewMessage(mc.desc)
	mc.encode(reflect.ValueOf(sampleRich()), m)
	seed, err := proto.Marshal(m)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Add([]byte{})
	f.Add([]byte{0x28, 0x80, 0x02}) // small = 256
	f.Fuzz(func(t *testing.T, b []byte) {
		msg := dynamicpb.NewMessage(mc.desc)
		if unmarshalRecovered(b, msg) != nil {
			return
		}
		var v rich
		if err := mc.decode(msg, reflect.ValueOf(&v).Elem()); err != nil {
			if _, ok := err.(*fieldError); !ok {
				t.Fatalf("decode = %T %v, want a *fieldError", err, err)
			}
			return
		}
		// Whatever decoded must encode to a message that decodes and
		// encodes to the same message (proto.Equal: NaN equals NaN).
		m1 := dynamicpb.NewMessage(mc.desc)
		mc.encode(reflect.ValueOf(v), m1)
		var v2 rich
		if err := mc.decode(m1, reflect.ValueOf(&v2).Elem()); err != nil {
			t.Fatalf("decode(encode(v)) = %v", err)
		}
		m2 := dynamicpb.NewMessage(mc.desc)
		mc.encode(reflect.ValueOf(v2), m2)
		if !proto.Equal(m1, m2) {
			t.Fatalf("encode(decode(encode(v))) != encode(v):\n%v\n%v", m1, m2)
		}
	})
}

// unmarshalRecovered is proto.Unmarshal with a panic as an error, as the
// adapters read a request message.
func unmarshalRecovered(b []byte, m proto.Message) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("malformed request message: %v", p)
		}
	}()
	return proto.Unmarshal(b, m)
}
