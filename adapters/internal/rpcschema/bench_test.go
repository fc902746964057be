package rpcschema

import (
	"reflect"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/dynamicpb"
)

// BenchmarkConvert measures the adapter's own share of a call: a Go value
// to a dynamic message and back, for a small flat message (three scalars,
// like the shop's orders) and for the rich test message (every supported
// shape). The wire encoding itself (proto.Marshal/Unmarshal) is left out:
// grpc-go's codec does it whichever way the message was built.
func BenchmarkConvert(b *testing.B) {
	a := newTestAdapter(b)
	cases := []struct {
		name string
		mc   *messageCodec
		v    any
	}{
		{"flat", a.methods["/test.v1.Echo/Flat"].in, flat{ID: "ord-1", Name: "widget", Amount: 3}},
		{"rich", a.methods["/test.v1.Echo/Rich"].in, sampleRich()},
	}
	for _, c := range cases {
		b.Run(c.name+"/encode", func(b *testing.B) {
			v := reflect.ValueOf(c.v)
			b.ReportAllocs()
			for b.Loop() {
				c.mc.encode(v, dynamicpb.NewMessage(c.mc.desc))
			}
		})
		b.Run(c.name+"/decode", func(b *testing.B) {
			m := dynamicpb.NewMessage(c.mc.desc)
			c.mc.encode(reflect.ValueOf(c.v), m)
			raw, err := proto.Marshal(m)
			if err != nil {
				b.Fatal(err)
			}
			parsed := dynamicpb.NewMessage(c.mc.desc)
			if err := proto.Unmarshal(raw, parsed); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				out := reflect.New(c.mc.goType).Elem()
				if err := c.mc.decode(parsed, out); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
