package logs

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel"

	"github.com/sundial-go/sundial/pipeline"
)

// errorLogger is the logger OTelErrors routes OpenTelemetry's errors to;
// nil: slog.Default.
var errorLogger atomic.Pointer[slog.Logger]

// errorRouter is the otel.ErrorHandler OTelErrors installs.
type errorRouter struct{}

// Handle logs err at Error on the logger in force.
func (errorRouter) Handle(err error) {
	l := errorLogger.Load()
	if l == nil {
		l = slog.Default()
	}
	l.LogAttrs(context.Background(), slog.LevelError, "sundial: opentelemetry error",
		slog.String("error", pipeline.ErrorText(err)))
}

// installMu serialises the check and the installation of errorRouter.
var installMu sync.Mutex

// OTelErrors makes l the destination of the errors OpenTelemetry reports
// through its global handler (otel.Handle): a span or metric export that
// failed, an exporter's full queue. Each becomes one record at Error,
// "sundial: opentelemetry error", with the error in "error". Without it,
// otel prints them as plain text with the log package.
//
// It installs its handler with otel.SetErrorHandler, again if another
// was installed since. The returned function gives the errors back to the
// logger in force before; with none, they go to slog.Default. Call it
// once the providers have shut down, so that their last errors are logged
// too.
func OTelErrors(l *slog.Logger) (restore func()) {
	installMu.Lock()
	if _, ok := otel.GetErrorHandler().(errorRouter); !ok {
		otel.SetErrorHandler(errorRouter{})
	}
	installMu.Unlock()
	prev := errorLogger.Swap(l)
	return func() { errorLogger.CompareAndSwap(l, prev) }
}
