package shopcmd

import (
	"context"
	"log/slog"
	"os"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

// TestShopRecordsSpansOnlyWhenExported: with no OTLP endpoint, a call
// with no traceparent, or an unsampled one, gets a real trace ID (its
// own, or its caller's) and no recorded span; a caller's sampled trace is
// recorded, its decision kept for the calls downstream. With an endpoint,
// every trace is recorded.
func TestShopRecordsSpansOnlyWhenExported(t *testing.T) {
	parent := func(flags trace.TraceFlags) context.Context {
		return trace.ContextWithRemoteSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, TraceFlags: flags, Remote: true}))
	}
	cases := []struct {
		name     string
		endpoint string
		ctx      context.Context
		record   bool
	}{
		{"no exporter, no traceparent", "", context.Background(), false},
		{"no exporter, unsampled traceparent", "", parent(0), false},
		{"no exporter, sampled traceparent", "", parent(trace.FlagsSampled), true},
		{"exporter, no traceparent", "http://127.0.0.1:1", context.Background(), true},
		{"exporter, unsampled traceparent", "http://127.0.0.1:1", parent(0), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", tc.endpoint)
			for _, k := range []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"} {
				t.Setenv(k, "")
			}
			tel, err := startTelemetry(context.Background(), os.Getenv)
			if err != nil {
				t.Fatal(err)
			}
			defer tel.shutdown(slog.New(slog.DiscardHandler))
			// Not ended: nothing is exported to the endpoint.
			_, span := tel.tp.Tracer("test").Start(tc.ctx, "orders.get")
			sc := span.SpanContext()
			if span.IsRecording() != tc.record || sc.IsSampled() != tc.record || !sc.TraceID().IsValid() {
				t.Errorf("recording %v, sampled %v, trace ID %v; want recording and sampled %v, a valid trace ID",
					span.IsRecording(), sc.IsSampled(), sc.TraceID(), tc.record)
			}
			if want := trace.SpanContextFromContext(tc.ctx).TraceID(); want.IsValid() && sc.TraceID() != want {
				t.Errorf("trace ID %v, want the caller's %v", sc.TraceID(), want)
			}
		})
	}
}
