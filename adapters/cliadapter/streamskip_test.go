package cliadapter

import (
	"context"
	"errors"
	"testing"

	"github.com/spf13/cobra"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
)

// TestStreamIsNoUnaryCommand: AddCommands' unary commands skip a
// streaming operation.
func TestStreamIsNoUnaryCommand(t *testing.T) {
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
	root := &cobra.Command{Use: "shop"}
	if err := AddCommands(root, reg, func() (*kernel.Kernel, error) { return kernel.New(kernel.WithRegistry(reg)) }); err != nil {
		t.Fatal(err)
	}
	if c, _, err := root.Find([]string{"orders", "watch"}); err == nil && c.Name() == "watch" {
		t.Fatal("the stream is a unary command")
	}
	if c, _, err := root.Find([]string{"orders", "get"}); err != nil || c.Name() != "get" {
		t.Fatalf("orders get: %v, %v", c, err)
	}
}
