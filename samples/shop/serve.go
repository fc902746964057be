package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

// newServeCommand returns `shop serve`.
//
// TODO(issue 7): serve HTTP on --http; (issue 3) gRPC on --grpc. Until the
// adapters land it prints the registered operations and their policies.
func newServeCommand(configFile *string) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the shop over HTTP and gRPC.",
		Args:  cobra.NoArgs,
	}
	httpAddr := cmd.Flags().String("http", ":5000", "HTTP listen `address`")
	grpcAddr := cmd.Flags().String("grpc", ":5001", "gRPC listen `address`")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		k, err := newKernel(*configFile)
		if err != nil {
			return err
		}
		_, _ = httpAddr, grpcAddr
		for _, d := range k.Registry().All() {
			fmt.Fprintf(cmd.OutOrStdout(), "%-16s %-6s %-18s %+v\n", d.ID, d.Method, d.Path, k.PolicyFor(d.ID))
		}
		return nil
	}
	return cmd
}
