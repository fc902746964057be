package asynclog_test

import (
	"context"
	"log/slog"
	"os"

	"github.com/sundial-go/sundial/samples/shop/internal/asynclog"
)

// Wrap the access log's handler so that a blocked stderr costs log lines,
// never responses, and flush it at shutdown.
func Example() {
	noTime := func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}
	h := asynclog.New(slog.NewJSONHandler(os.Stdout, &slog.HandlerOptions{ReplaceAttr: noTime}))
	logger := slog.New(h)
	logger.Info("request", "status", 200)
	_ = h.Close(context.Background())
	// Output:
	// {"level":"INFO","msg":"request","status":200}
}
