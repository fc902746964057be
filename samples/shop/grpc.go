package main

import (
	"context"
	"io"
	"log/slog"

	"github.com/sundial-go/sundial/kernel"
)

// startGRPC starts serving k over gRPC on addr and returns a function that
// stops it gracefully within its context (then forcibly). serve calls it
// after the HTTP listener is up and calls the returned function on
// shutdown with the remaining grace period.
//
// CALL POINT for the gRPC adapter (issue 3): this placeholder accepts
// --grpc and serves nothing; the gRPC adapter's author replaces this
// function (keeping its signature) with real serving.
func startGRPC(ctx context.Context, k *kernel.Kernel, addr string, logger *slog.Logger, stdout io.Writer) (stop func(context.Context) error, err error) {
	return func(context.Context) error { return nil }, nil
}
