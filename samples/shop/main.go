// Command shop is Sundial's main sample: a small shop whose operations are
// served over HTTP, gRPC, MCP and the command line from one registration
// and one JSON config.
//
//	shop serve [--config FILE] [--http ADDR] [--grpc ADDR]
//	shop mcp [--config FILE]
//	shop orders create --name widget --amount 1 [--timeout SECONDS] [--output json|text]
//	shop reports export --input '{"delayMs": 500}'
//
// The operation commands run in-process on the same kernel and config as
// serve; their exit codes follow the outcome table of docs/pipeline.md
// (docs/cli.md). The operations are in app; the commands in
// internal/shopcmd.
package main

import (
	"os"

	"github.com/sundial-go/sundial/samples/shop/internal/shopcmd"
)

func main() {
	os.Exit(shopcmd.Run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
