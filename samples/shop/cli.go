package main

import (
	"github.com/spf13/cobra"

	"github.com/sundial-go/sundial/adapters/cliadapter"
	"github.com/sundial-go/sundial/kernel"
)

// addOperationCommands adds one command per shop operation beside serve
// ("shop orders create", "shop reports export", ...). Each runs its
// operation in-process on a kernel built like serve's, from the embedded
// config, --config and the SUNDIAL_ environment; Ctrl-C or SIGTERM cancels
// it (exit code 8).
func addOperationCommands(root *cobra.Command, configFile *string) error {
	reg, err := newRegistry()
	if err != nil {
		return err
	}
	return cliadapter.AddCommands(root, reg, func() (*kernel.Kernel, error) {
		return newKernel(*configFile)
	})
}
