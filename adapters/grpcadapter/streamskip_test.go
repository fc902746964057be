package grpcadapter_test

import (
	"context"
	"errors"
	"testing"

	"github.com/sundial-go/sundial/adapters/grpcadapter"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
)

// TestStreamIsNoUnaryMethod: the adapter's unary methods skip a
// streaming operation.
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
	ms := a.Methods()
	if len(ms) != 1 || ms[0].OperationID != "orders.get" {
		t.Fatalf("methods %v, want orders.get's alone", ms)
	}
}
