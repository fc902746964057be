// Command shop is Sundial's main sample: a small shop whose operations are
// served over HTTP, gRPC and the command line from one registration and
// one JSON config.
//
//	shop serve [--config FILE] [--http ADDR] [--grpc ADDR]
//	shop orders create --name widget --amount 1 [--timeout SECONDS] [--output json|text]
//	shop reports export --input '{"delayMs": 500}'
//
// The operation commands run in-process on the same kernel and config as
// serve; their exit codes follow the outcome table of docs/pipeline.md
// (docs/cli.md).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"

	"github.com/spf13/cobra"

	"github.com/sundial-go/sundial/adapters/cliadapter"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/samples/shop/app"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run builds the root command and executes it, returning the exit code.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
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
	root.AddCommand(newServeCommand(configFile))
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

// lockedWriter serialises the writes of several goroutines to w.
type lockedWriter struct {
	mu sync.Mutex // guards w
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// newKernel builds the shop's kernel: its operations, the embedded default
// config, the config file (if any) and SUNDIAL_ environment overrides.
func newKernel(configFile string, opts ...kernel.Option) (*kernel.Kernel, error) {
	reg, err := newRegistry()
	if err != nil {
		return nil, err
	}
	base := []kernel.Option{
		kernel.WithRegistry(reg),
		kernel.WithConfigJSON(app.DefaultConfig),
		kernel.WithConfigFile(configFile),
		kernel.WithEnv("SUNDIAL_"),
	}
	base = append(base, extraKernelOptions...)
	k, err := kernel.New(append(base, opts...)...)
	if fe, ok := errors.AsType[*kernel.ConfigFileError](err); ok && fe.Path == configFile {
		return nil, fmt.Errorf("--config %s: %w", fe.Path, fe.Err)
	}
	return k, err
}

// extraKernelOptions are added to every kernel the shop builds; only the
// tests set it (a probe that records when handlers run, in a shop process
// started by a test).
var extraKernelOptions []kernel.Option

// newRegistry returns the shop's operations, registered on a new shop.
func newRegistry() (*operations.Registry, error) {
	reg := operations.NewRegistry()
	if err := app.New().Register(reg); err != nil {
		return nil, err
	}
	return reg, nil
}
