package httpadapter_test

import (
	"context"
	"errors"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/sundial-go/sundial/adapters/httpadapter"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
)

// TestStreamIsNoUnaryRoute: Mount's unary routes skip a streaming
// operation, even one with a method and a path.
func TestStreamIsNoUnaryRoute(t *testing.T) {
	type in struct{ ID string }
	reg := operations.NewRegistry()
	err := errors.Join(
		operations.Register(reg, operations.Descriptor{ID: "orders.get", Method: "GET", Path: "/orders/:id"},
			func(context.Context, in) (in, error) { return in{}, nil }),
		operations.RegisterServerStream(reg, operations.Descriptor{ID: "orders.watch", Method: "GET", Path: "/orders/watch"},
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
	e := echo.New()
	if _, err := httpadapter.Mount(e, k); err != nil {
		t.Fatal(err)
	}
	for _, r := range e.Routes() {
		if r.Path == "/orders/watch" {
			t.Fatalf("the stream is mounted as a unary route: %s %s", r.Method, r.Path)
		}
	}
}
