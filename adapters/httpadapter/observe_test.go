package httpadapter_test

import (
	"context"
	"encoding/hex"
	"log/slog"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sundial-go/sundial/adapters/httpadapter"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
	"github.com/sundial-go/sundial/resilience"
)

// withTracer returns kernel options installing an SDK tracer provider that
// exports every ended span, synchronously, to the returned exporter.
func withTracer(t *testing.T) ([]kernel.Option, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return []kernel.Option{kernel.WithTracerProvider(tp)}, exp
}

// spansOf returns the exported spans of the trace id.
func spansOf(exp *tracetest.InMemoryExporter, id string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.SpanContext.TraceID().String() == id {
			out = append(out, s)
		}
	}
	return out
}

func isTraceID(s string) bool {
	b, err := hex.DecodeString(s)
	return err == nil && len(b) == 16 && strings.Trim(s, "0") != ""
}

// Every response the adapter writes — its own rejections before the
// pipeline and the answer given at the deadline included — carries the
// trace ID of a span of its own, and the access log says the same.
func TestEveryResponseIsObserved(t *testing.T) {
	app := newTestApp()
	kopts, exp := withTracer(t)
	s := startServer(t, app, serverOpts{kernel: kopts, adapter: []httpadapter.Option{httpadapter.WithBodyLimit(64)},
		routes: func(e *echo.Echo, a *httpadapter.Adapter) {
			e.GET("/healthz", a.Wrap(func(c echo.Context) error { return c.String(200, "ok") }))
			e.GET("/forbidden", func(echo.Context) error { return echo.NewHTTPError(403, "not yours") })
		}})
	tests := []struct {
		name, method, path, body string
		header                   map[string]string
		status                   int
		kind, code               string
		span                     string // the span's name
	}{
		{"malformed deadline header", "POST", "/work", `{}`, map[string]string{httpadapter.HeaderDeadline: "tomorrow"},
			400, "VALIDATION", "KERNEL_VALIDATION_002", "work.run"},
		{"malformed relative deadline", "POST", "/work", `{}`, map[string]string{httpadapter.DefaultRelativeDeadlineHeader: "-1"},
			400, "VALIDATION", "KERNEL_VALIDATION_002", "work.run"},
		{"bad JSON", "POST", "/items", `{"name": 12a}`, nil, 400, "VALIDATION", httpadapter.CodeMalformedBody, "items.create"},
		{"wrong type", "GET", "/items/abc", "", nil, 400, "VALIDATION", httpadapter.CodeWrongType, "items.get"},
		{"body too large", "POST", "/items", `{"name":"` + strings.Repeat("x", 100) + `"}`, nil,
			413, "VALIDATION", httpadapter.CodeBodyTooLarge, "items.create"},
		{"unknown route", "GET", "/nope", "", nil, 404, "NOT_FOUND", httpadapter.CodeRouteNotFound, "GET (unmatched)"},
		{"wrong method", "PUT", "/items", "", nil, 405, "NOT_FOUND", httpadapter.CodeMethodNotAllowed, "PUT (unmatched)"},
		{"host endpoint, malformed deadline", "GET", "/healthz", "", map[string]string{httpadapter.HeaderDeadline: "soon"},
			400, "VALIDATION", "KERNEL_VALIDATION_002", "GET /healthz"},
		{"application route's error", "GET", "/forbidden", "", nil, 403, "FORBIDDEN", httpadapter.CodeBadRequest, "GET /forbidden"},
		{"deadline already past", "POST", "/work", `{}`, map[string]string{httpadapter.DefaultRelativeDeadlineHeader: "0"},
			504, "TIMEOUT", pipeline.CodeTimeout, "work.run"},
		{"answered at the deadline", "POST", "/work", `{"ignoreCtx":true}`, map[string]string{httpadapter.DefaultRelativeDeadlineHeader: "100"},
			504, "TIMEOUT", pipeline.CodeTimeout, "work.run"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := app.calls.Load()
			r := s.do(t, tt.method, tt.path, tt.body, tt.header)
			instance, _, _ := strings.Cut(tt.path, "?")
			checkProblem(t, r, tt.status, tt.kind, tt.code, instance)
			id, _ := r.problem["traceId"].(string)
			if !isTraceID(id) {
				t.Fatalf("traceId = %q, want a trace ID", id)
			}
			spans := spansOf(exp, id)
			if len(spans) != 1 {
				t.Fatalf("%d spans with trace ID %s, want 1", len(spans), id)
			}
			if sp := spans[0]; sp.Name != tt.span || sp.Status.Description == "" || !strings.HasPrefix(sp.Status.Description, tt.code) {
				t.Errorf("span = %q with status %q, want %q with status %s", sp.Name, sp.Status.Description, tt.span, tt.code)
			}
			rec := s.logs.waitRecord(t, "http request", "traceId", id, time.Second)
			if rec.Attrs["status"] != int64(tt.status) || rec.Attrs["code"] != tt.code {
				t.Errorf("access record = %v, want status %d, code %s", rec.Attrs, tt.status, tt.code)
			}
			if n := len(s.logs.Find(func(r pipelinetest.Record) bool { return r.Attrs["traceId"] == id && r.Message == "http request" })); n != 1 {
				t.Errorf("%d access records for trace %s, want 1", n, id)
			}
			if tt.name == "answered at the deadline" {
				app.unblock()
				// A handler runs late only if it started: on a loaded
				// machine the deadline can pass before the kernel starts
				// it, and the kernel then does not run it.
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if err := s.k.Wait(ctx); err != nil {
					t.Fatal(err)
				}
				if app.calls.Load() == before {
					t.Log("the deadline passed before the handler started: nothing ran late")
				} else if _, ok := s.logs.WaitFor(5*time.Second, pipelinetest.Message("kernel: late result discarded")); !ok {
					t.Error("the straggler's late result was not logged")
				}
			} else if n := app.calls.Load() - before; n != 0 {
				t.Errorf("the handler ran %d times, want never", n)
			}
		})
	}
}

// The budget the telemetry reports is what the caller sent, even when the
// kernel's cap binds the invocation's deadline.
func TestBudgetIsWhatTheCallerSent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		app := newTestApp()
		kopts, exp := withTracer(t)
		k, err := kernel.New(append([]kernel.Option{kernel.WithRegistry(app.register(t)),
			kernel.WithConfigJSON([]byte(testConfig))}, kopts...)...) // MaxTimeoutSeconds: 10
		if err != nil {
			t.Fatal(err)
		}
		e := echo.New()
		if _, err := httpadapter.Mount(e, k); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		req := httptest.NewRequest("POST", "/work", strings.NewReader(`{"delayMs":0}`))
		req.Header.Set(httpadapter.DefaultRelativeDeadlineHeader, "100000")
		w := httptest.NewRecorder()
		e.ServeHTTP(w, req)
		if w.Code != 200 {
			t.Fatalf("status = %d %s, want 200", w.Code, w.Body)
		}
		spans := exp.GetSpans()
		if len(spans) != 1 {
			t.Fatalf("%d spans, want 1", len(spans))
		}
		attrs := map[attribute.Key]attribute.Value{}
		for _, kv := range spans[0].Attributes {
			attrs[kv.Key] = kv.Value
		}
		if got := attrs["sundial.deadline.budget_ms"]; got.AsInt64() != 100000 {
			t.Errorf("sundial.deadline.budget_ms = %v, want the caller's 100000", got.Emit())
		}
		capped := start.Add(10 * time.Second).UTC().Format(time.RFC3339Nano)
		if got := attrs["sundial.deadline"]; got.AsString() != capped {
			t.Errorf("sundial.deadline = %v, want the kernel's cap %s", got.Emit(), capped)
		}
		app.mu.Lock()
		defer app.mu.Unlock()
		if len(app.deadlines) != 1 || !app.deadlines[0].Equal(start.Add(10*time.Second)) {
			t.Errorf("handler's deadlines = %v, want the cap, %v", app.deadlines, start.Add(10*time.Second))
		}
	})
}

// A typed nil returned as an error — a foreign one whose Error and Unwrap
// methods read their receiver, or a *pipeline.Error — is a 500 UNEXPECTED
// that says nothing, with one access log line, on every kind of route:
// an operation, a host endpoint (Wrap) and an application's own echo
// route (HTTPErrorHandler). The process and the connection survive.
func TestTypedNilErrorIsUnexpected(t *testing.T) {
	app := newTestApp()
	access := newLogSink()
	s := startServer(t, app, serverOpts{
		kernel: []kernel.Option{kernel.WithAccessLog(access.Logger())},
		routes: func(e *echo.Echo, a *httpadapter.Adapter) {
			e.GET("/host", a.Wrap(func(echo.Context) error { return typedNil() }))
			e.GET("/app", func(echo.Context) error { return typedNil() })
		},
	})
	tests := []struct{ name, method, path, body string }{
		{"operation, foreign typed nil", "POST", "/typednil", `{}`},
		{"operation, typed-nil *pipeline.Error", "POST", "/typednil", `{"pipeline":true}`},
		{"host endpoint", "GET", "/host", ""},
		{"application route", "GET", "/app", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s.logs.Reset()
			access.Reset()
			r := s.do(t, tt.method, tt.path, tt.body, nil)
			checkProblem(t, r, 500, "UNEXPECTED", pipeline.CodeUnexpected, tt.path)
			if r.problem["detail"] != pipeline.UnexpectedMessage || len(details(r)) != 0 {
				t.Errorf("problem = %s, want the unexpected message and no details", r.body)
			}
			recs := s.logs.records("http request")
			if len(recs) != 1 || recs[0].Level != slog.LevelError || recs[0].Attrs["status"] != int64(500) ||
				recs[0].Attrs["code"] != pipeline.CodeUnexpected {
				t.Fatalf("access records = %v, want one ERROR with status 500, code %s", recs, pipeline.CodeUnexpected)
			}
			if msg, _ := recs[0].Attrs["error"].(string); msg == "" {
				t.Errorf("access record has no error text: %v", recs[0].Attrs)
			}
			if recs := access.records("sundial: invocation"); len(recs) != 1 || recs[0].Attrs["code"] != pipeline.CodeUnexpected {
				t.Errorf("kernel access records = %v, want one with code %s", recs, pipeline.CodeUnexpected)
			}
		})
	}
	// The server lives on, on the same connection.
	if r := s.do(t, "POST", "/items", `{"name":"a"}`, nil); r.status != 201 {
		t.Errorf("POST /items = %d %s, want 201", r.status, r.body)
	}
}

// A retry-after is sent as the Retry-After header and details.retryAfter,
// in whole seconds.
func TestRetryAfter(t *testing.T) {
	s := startServer(t, newTestApp(), serverOpts{})
	for range 3 {
		if r := s.do(t, "POST", "/items", `{"name":"a"}`, nil); r.status != 201 {
			t.Fatalf("POST /items = %d %s, want 201", r.status, r.body)
		}
	}
	r := s.do(t, "POST", "/items", `{"name":"a"}`, nil) // PermitLimit 3 per 60 s
	checkProblem(t, r, 503, "UNAVAILABLE", resilience.CodeRateLimited, "/items")
	ra, _ := details(r)["retryAfter"].(float64)
	if ra < 1 || ra > 60 || ra != float64(int64(ra)) {
		t.Fatalf("details.retryAfter = %v, want whole seconds in [1, 60]", details(r)["retryAfter"])
	}
	if got, want := r.header.Get("Retry-After"), strconv.FormatInt(int64(ra), 10); got != want {
		t.Errorf("Retry-After = %q, want %q", got, want)
	}
}
