package kernel_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
)

// An adaptive concurrency limit, and a shadow first: orders.create runs
// with "ConcurrencyLimit": "adaptive"; orders.list keeps its static limit
// of 100 while a controller in shadow mode reports the limit it would
// apply. The status shows both; a reload that switches orders.list to
// "adaptive" enforces what its shadow learned, and one that lowers
// MaxLimit clamps the limit learned instead of restarting it.
func Example_adaptiveConcurrency() {
	dir, _ := os.MkdirTemp("", "adaptive")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "config.json")
	write := func(list string) {
		doc := `{"Sundial":{"Kernel":{"Resilience":{"Operations":{
			"orders.create":{"ConcurrencyLimit":"adaptive","Adaptive":{"MinLimit":5,"MaxLimit":200,"HealthyLatencyMs":500}},
			"orders.list":` + list + `}}}}}`
		_ = os.WriteFile(path, []byte(doc), 0o600)
	}
	write(`{"ConcurrencyLimit":100,"Adaptive":{"Shadow":true}}`)
	reg := operations.NewRegistry()
	for _, id := range []string{"orders.create", "orders.list"} {
		_ = operations.Register(reg, operations.Descriptor{ID: id}, func(context.Context, struct{}) (struct{}, error) { return struct{}{}, nil })
	}
	k, err := kernel.New(kernel.WithRegistry(reg), kernel.WithConfigFile(path))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer k.Close()
	show := func() {
		for _, op := range k.Status().Operations {
			fmt.Printf("%s: enforced %d, adaptive %d\n", op.ID, op.ConcurrencyLimit, op.AdaptiveLimit)
		}
	}
	show()
	write(`{"ConcurrencyLimit":"adaptive","Adaptive":{"MaxLimit":15}}`)
	_, _ = k.Reload()
	show()
	// Output:
	// orders.create: enforced 20, adaptive 20
	// orders.list: enforced 100, adaptive 20
	// orders.create: enforced 20, adaptive 20
	// orders.list: enforced 15, adaptive 15
}
