package cliadapter

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/spf13/cobra"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
)

// TestStreamIsNoUnaryCommand: AddCommands' unary commands skip a
// streaming operation: its command streams, one JSON line a message.
func TestStreamIsNoUnaryCommand(t *testing.T) {
	type in struct{ ID string }
	reg := operations.NewRegistry()
	err := errors.Join(
		operations.Register(reg, operations.Descriptor{ID: "orders.get"},
			func(context.Context, in) (in, error) { return in{}, nil }),
		operations.RegisterServerStream(reg, operations.Descriptor{ID: "orders.watch"},
			func(_ context.Context, _ in, s *operations.Sender[in]) error { return s.Send(in{ID: "1"}) }),
	)
	if err != nil {
		t.Fatal(err)
	}
	root := &cobra.Command{Use: "shop"}
	if err := AddCommands(root, reg, func() (*kernel.Kernel, error) { return kernel.New(kernel.WithRegistry(reg)) }); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs([]string{"orders", "watch"})
	if err := root.Execute(); err != nil || out.String() != "{\"ID\":\"1\"}\n" {
		t.Fatalf("orders watch: %v, stdout %q; want one JSON line", err, out.String())
	}
	if c, _, err := root.Find([]string{"orders", "get"}); err != nil || c.Name() != "get" {
		t.Fatalf("orders get: %v, %v", c, err)
	}
}
