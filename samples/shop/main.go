// Command shop is Sundial's main sample: a small shop whose operations are
// served over HTTP, gRPC and the command line from one registration and
// one JSON config.
package main

import (
	"fmt"
	"os"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/samples/shop/app"
)

func main() {
	reg := operations.NewRegistry()
	if err := app.New().Register(reg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	k, err := kernel.New(kernel.WithRegistry(reg), kernel.WithConfigJSON(app.DefaultConfig), kernel.WithEnv("SUNDIAL_"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	for _, d := range k.Registry().All() {
		p := k.PolicyFor(d.ID)
		fmt.Printf("%-16s %-6s %-18s %+v\n", d.ID, d.Method, d.Path, p)
	}
}
