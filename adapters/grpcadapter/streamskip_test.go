package grpcadapter_test

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/grpc"

	"github.com/sundial-go/sundial/adapters/grpcadapter"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
)

// TestStreamIsNoUnaryMethod: the adapter serves a streaming operation as
// a stream of its kind, never as a unary method.
func TestStreamIsNoUnaryMethod(t *testing.T) {
	type in struct{ ID string }
	reg := operations.NewRegistry()
	err := errors.Join(
		operations.Register(reg, operations.Descriptor{ID: "orders.get"},
			func(context.Context, in) (in, error) { return in{}, nil }),
		operations.RegisterServerStream(reg, operations.Descriptor{ID: "orders.watch"},
			func(context.Context, in, *operations.Sender[in]) error { return nil }),
	)
	if err != nil {
		t.Fatal(err)
	}
	k, err := kernel.New(kernel.WithRegistry(reg))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	a, err := grpcadapter.New(k)
	if err != nil {
		t.Fatal(err)
	}
	var sds recorder
	a.Register(&sds)
	if len(sds) != 1 {
		t.Fatalf("%d services, want 1", len(sds))
	}
	sd := sds[0]
	if len(sd.Methods) != 1 || sd.Methods[0].MethodName != "Get" {
		t.Errorf("unary methods %v, want Get's alone", sd.Methods)
	}
	if len(sd.Streams) != 1 || sd.Streams[0].StreamName != "Watch" || !sd.Streams[0].ServerStreams || sd.Streams[0].ClientStreams {
		t.Errorf("streams %+v, want Watch, a server stream", sd.Streams)
	}
}

// recorder records the services registered with it.
type recorder []*grpc.ServiceDesc

func (r *recorder) RegisterService(sd *grpc.ServiceDesc, _ any) { *r = append(*r, sd) }
