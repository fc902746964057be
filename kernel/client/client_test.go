package client_test

import (
	"context"
	"strings"
	"testing"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/kernel/client"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
)

// TestNewRefusesWhatItCannotCall: New fails, naming the operation, for an
// unknown ID, a nil transport, or types that are not the operation's.
func TestNewRefusesWhatItCannotCall(t *testing.T) {
	reg := operations.NewRegistry()
	if err := register(reg); err != nil {
		t.Fatal(err)
	}
	k, err := kernel.New(kernel.WithRegistry(reg))
	if err != nil {
		t.Fatal(err)
	}
	for name, build := range map[string]func() error{
		"unknown ID": func() error { _, err := client.New[Charge, Receipt](client.Local(k), "billing.refund"); return err },
		"nil transport": func() error {
			_, err := client.New[Charge, Receipt](nil, "billing.charge")
			return err
		},
		"wrong input":  func() error { _, err := client.New[Receipt, Receipt](client.Local(k), "billing.charge"); return err },
		"wrong output": func() error { _, err := client.New[Charge, *Receipt](client.Local(k), "billing.charge"); return err },
		"nil kernel":   func() error { _, err := client.New[Charge, Receipt](client.Local(nil), "billing.charge"); return err },
	} {
		if err := build(); err == nil || !strings.Contains(err.Error(), "billing.") {
			t.Errorf("%s: err %v, want one naming the operation", name, err)
		}
	}
}

// TestLocalCallChecksConstraints: an in-process call checks the input's
// validate tags before the handler runs, as the adapters do.
func TestLocalCallChecksConstraints(t *testing.T) {
	type in struct {
		Qty int `json:"qty" validate:"min=1"`
	}
	reg := operations.NewRegistry()
	ran := false
	if err := operations.Register(reg, operations.Descriptor{ID: "t.take"}, func(_ context.Context, _ in) (struct{}, error) {
		ran = true
		return struct{}{}, nil
	}); err != nil {
		t.Fatal(err)
	}
	k, err := kernel.New(kernel.WithRegistry(reg))
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New[in, struct{}](client.Local(k), "t.take")
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Call(t.Context(), in{})
	if code := kernelCode(err); code != "KERNEL_VALIDATION_007" || ran {
		t.Fatalf("err %v (handler ran: %v), want KERNEL_VALIDATION_007 before the handler", err, ran)
	}
	if _, err := c.Call(t.Context(), in{Qty: 1}); err != nil || !ran {
		t.Fatalf("err %v (handler ran: %v), want success", err, ran)
	}
}

// kernelCode returns the code of err's outcome, "" for nil.
func kernelCode(err error) string {
	if err == nil {
		return ""
	}
	return pipeline.AsError(err).Code()
}
