package shopcmd

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"github.com/sundial-go/sundial/adapters/cliadapter"
	"github.com/sundial-go/sundial/kernel"
)

// addOperationCommands adds one command per shop operation beside serve
// ("shop orders create", "shop reports export", ...). Each runs its
// operation in-process on a kernel built like serve's, from the embedded
// config, --config and the SUNDIAL_ environment; Ctrl-C or SIGTERM cancels
// it (exit code 8).
//
// The commands' kernel logs to logger. With an OTLP endpoint configured
// (OTEL_EXPORTER_OTLP_ENDPOINT), the command's invocation span is exported
// like serve's, and OpenTelemetry's errors go to logger too; *tracing is
// then set, and the caller flushes it before exiting.
func addOperationCommands(root *cobra.Command, configFile *string, logger *slog.Logger, tracing **cliTracing) error {
	reg, err := NewRegistry()
	if err != nil {
		return err
	}
	return cliadapter.AddCommands(root, reg, func() (*kernel.Kernel, error) {
		tr, err := startCLITracing(context.Background(), os.Getenv, logger)
		if err != nil {
			return nil, fmt.Errorf("telemetry: %w", err)
		}
		if tr == nil {
			return NewKernel(*configFile, kernel.WithLogger(logger))
		}
		*tracing = tr
		return NewKernel(*configFile, kernel.WithLogger(logger), kernel.WithTracerProvider(tr.tp))
	})
}
