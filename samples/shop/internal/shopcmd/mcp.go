package shopcmd

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/sundial-go/sundial/adapters/cliadapter"
	"github.com/sundial-go/sundial/adapters/mcpadapter"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/pipeline"
)

// newMCPCommand returns `shop mcp`: the shop's operations as MCP tools
// over standard input and output, for an agent host to launch.
func newMCPCommand(configFile *string) *cobra.Command {
	return &cobra.Command{
		Use:   "mcp",
		Short: "Serve the shop's operations as MCP tools over stdin and stdout.",
		Long: `Serve the shop's operations as Model Context Protocol tools over standard
input and output (newline-delimited JSON-RPC), until the client closes
standard input, or SIGINT or SIGTERM. An agent host launches it, e.g.
{"command": "shop", "args": ["mcp"]}. Logs, the access log of each tool
call included, go to standard error. docs/mcp.md describes the tools.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			logger := slog.New(slog.NewJSONHandler(cmd.ErrOrStderr(), nil))
			k, err := NewKernel(*configFile, kernel.WithLogger(logger))
			if err != nil {
				return err
			}
			defer k.Close()
			m, err := mcpadapter.New(k, &mcpadapter.Options{Name: "shop", Version: serviceVersion()})
			if err != nil {
				return err
			}
			err = m.ServeStdio(ctx, cmd.InOrStdin(), cmd.OutOrStdout())
			wctx, cancel := context.WithTimeout(context.Background(), defaultGrace)
			defer cancel()
			if werr := k.Wait(wctx); werr != nil {
				logger.Warn("shop: mcp: calls still running at exit", "error", werr.Error())
			}
			if err != nil && !errors.Is(err, context.Canceled) {
				return &cliadapter.ExitError{Code: cliadapter.ExitCodeFor(pipeline.KindUnexpected), Err: err}
			}
			return nil
		},
	}
}
