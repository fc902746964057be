// Package shopcmd is the shop's command line: the root command, `shop
// serve` and one command per operation. The shop's main calls Run; the
// shop's system tests call Serve, NewKernel and the rest directly.
package shopcmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"sync"

	"github.com/spf13/cobra"

	"github.com/sundial-go/sundial/adapters/cliadapter"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/samples/shop/app"
)

// Run builds the root command and executes it, returning the exit code.
func Run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := &cobra.Command{
		Use:           "shop",
		Short:         "Sundial's sample shop: orders, reports and billing over HTTP, gRPC and the CLI.",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	// The command's output, its Problem Details and its log records share
	// stderr, from more than one goroutine.
	stderr = &lockedWriter{w: stderr}
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	configFile := new(string)
	root.PersistentFlags().Var(cliadapter.NamedString(configFile, "file"), "config", "JSON config file loaded over the embedded default config")
	root.AddCommand(newServeCommand(configFile), newMCPCommand(configFile))
	// The operation commands log Warn and above as JSON on stderr: a
	// config naming no operation, the cause of an UNEXPECTED outcome,
	// OpenTelemetry's errors. stdout keeps the result alone.
	logger := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var tracing *cliTracing
	if err := addOperationCommands(root, configFile, logger, &tracing); err != nil {
		io.WriteString(stderr, "shop: "+err.Error()+"\n")
		return 1
	}
	code := cliadapter.Execute(context.Background(), root)
	tracing.shutdown(logger) // the operation command's spans, when OTLP is configured
	return code
}

// lockedWriter serialises the writes of several goroutines to w: the
// operation commands' logger and cliadapter both write to the shop's
// stderr, and only one lock they share keeps their lines whole. The
// writer of a test is a plain buffer, which needs that lock too.
type lockedWriter struct {
	mu sync.Mutex // guards w
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// NewKernel builds the shop's kernel: its operations, the embedded default
// config, the config file (if any) and SUNDIAL_ environment overrides.
func NewKernel(configFile string, opts ...kernel.Option) (*kernel.Kernel, error) {
	reg, err := NewRegistry()
	if err != nil {
		return nil, err
	}
	base := []kernel.Option{
		kernel.WithRegistry(reg),
		kernel.WithConfigJSON(app.DefaultConfig),
		kernel.WithConfigFile(configFile),
		kernel.WithEnv("SUNDIAL_"),
	}
	base = append(base, ExtraKernelOptions...)
	k, err := kernel.New(append(base, opts...)...)
	if fe, ok := errors.AsType[*fs.PathError](err); ok && fe.Path == configFile {
		return nil, fmt.Errorf("--config %s: %w", fe.Path, fe.Err)
	}
	return k, err
}

// ExtraKernelOptions are added to every kernel the shop builds. Only tests set
// it: a probe that records when handlers run, in a shop process a test
// started.
var ExtraKernelOptions []kernel.Option

// NewRegistry returns the shop's operations, registered on a new shop.
func NewRegistry() (*operations.Registry, error) {
	reg := operations.NewRegistry()
	if err := app.New().Register(reg); err != nil {
		return nil, err
	}
	return reg, nil
}
