package logs_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	klogs "github.com/sundial-go/sundial/kernel/logs"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
)

// keepErrorHandler puts otel's global error handler back when t ends.
func keepErrorHandler(t *testing.T) {
	prev := otel.GetErrorHandler()
	t.Cleanup(func() { otel.SetErrorHandler(prev) })
}

// TestLogErrorsRoutesExportFailures: a span export to a closed port is
// one structured record at Error on the logger OTelErrors was given, not a
// line of plain text.
func TestLogErrorsRoutesExportFailures(t *testing.T) {
	keepErrorHandler(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	exp, err := otlptracehttp.New(t.Context(), otlptracehttp.WithEndpoint(addr), otlptracehttp.WithInsecure(),
		otlptracehttp.WithRetry(otlptracehttp.RetryConfig{Enabled: false}))
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp)) // exports as each span ends
	defer tp.Shutdown(context.Background())

	var logs pipelinetest.LogSink
	restore := klogs.OTelErrors(logs.Logger())
	defer restore()
	_, span := tp.Tracer("test").Start(context.Background(), "call")
	span.End()

	recs := logs.Find(pipelinetest.Message("sundial: opentelemetry error"))
	if len(recs) != 1 {
		t.Fatalf("records = %+v, want one export failure", logs.Records())
	}
	msg, _ := recs[0].Attrs["error"].(string)
	if recs[0].Level.String() != "ERROR" || !strings.Contains(msg, addr) {
		t.Errorf("record = %+v, want level ERROR and an error naming %s", recs[0], addr)
	}
}

// TestLogErrorsRestore: the function OTelErrors returns gives the errors
// back to the logger in force before, and OTelErrors installs its handler
// again over one installed since.
func TestLogErrorsRestore(t *testing.T) {
	keepErrorHandler(t)
	var outer, inner pipelinetest.LogSink
	restoreOuter := klogs.OTelErrors(outer.Logger())
	defer restoreOuter()
	restoreInner := klogs.OTelErrors(inner.Logger())
	otel.Handle(errors.New("first"))
	restoreInner()
	otel.Handle(errors.New("second"))
	if n, m := len(inner.Records()), len(outer.Records()); n != 1 || m != 1 {
		t.Fatalf("inner has %d records, outer %d; want 1 and 1", n, m)
	}
	if got := outer.Records()[0].Attrs["error"]; got != "second" {
		t.Errorf("outer record's error = %v, want second", got)
	}

	var other pipelinetest.LogSink
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(error) {}))
	defer klogs.OTelErrors(other.Logger())()
	otel.Handle(errors.New("third"))
	if len(other.Records()) != 1 {
		t.Errorf("after another handler was installed, OTelErrors' logger got %d records, want 1", len(other.Records()))
	}
}
