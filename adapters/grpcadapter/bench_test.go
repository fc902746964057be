package grpcadapter

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
)

// BenchmarkReceive measures what WithRecvTimeout adds to the receipt of a
// request message that is already there (grpc-go's dec returns at once
// with the flat message): off, the adapter decodes on the calling
// goroutine; at the default bound it hands the read to a receiver
// goroutine (the same one, call after call) under a timer. BenchmarkGRPCRecvTimeout (samples/shop, in make bench)
// sets this against a whole call over a loopback connection.
func BenchmarkReceive(b *testing.B) {
	type flat struct {
		ID     string `json:"id"`
		Name   string `json:"name"`
		Amount int    `json:"amount"`
	}
	reg := operations.NewRegistry()
	flatEcho := func(_ context.Context, in flat) (flat, error) { return in, nil }
	if err := operations.Register(reg, operations.Descriptor{ID: "echo.flat"}, flatEcho); err != nil {
		b.Fatal(err)
	}
	k, err := kernel.New(kernel.WithRegistry(reg))
	if err != nil {
		b.Fatal(err)
	}
	a, err := New(k, WithPackage("test.v1"))
	if err != nil {
		b.Fatal(err)
	}
	mc := a.methods["/test.v1.Echo/Flat"]
	m, err := mc.Request(flat{ID: "ord-1", Name: "widget", Amount: 3})
	if err != nil {
		b.Fatal(err)
	}
	raw, err := proto.Marshal(m)
	if err != nil {
		b.Fatal(err)
	}
	dec := func(v any) error { return proto.Unmarshal(raw, v.(*dynamicpb.Message)) }
	for _, c := range []struct {
		name  string
		bound time.Duration
	}{{"recv=off", 0}, {"recv=default", defaultRecvTimeout}} {
		b.Run(c.name, func(b *testing.B) {
			a.cfg.recvTimeout = c.bound
			b.ReportAllocs()
			for b.Loop() {
				if err := a.receive(dec, dynamicpb.NewMessage(mc.Input())); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
