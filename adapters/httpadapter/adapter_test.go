package httpadapter_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/sundial-go/sundial/adapters/httpadapter"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
	"github.com/sundial-go/sundial/resilience/idempotency"
)

func TestServeSuccess(t *testing.T) {
	app := newTestApp()
	s := startServer(t, app, serverOpts{})
	tests := []struct {
		name, method, path, body string
		status                   int
		want                     string // exact body
	}{
		{"create is 201", "POST", "/items", `{"name":"bolt","qty":2}`, 201, `{"id":"it-1","name":"bolt","qty":2}`},
		{"get is 200", "GET", "/items/7?limit=5&verbose=true", "", 200, `{"id":"it-1","name":"","qty":0}`},
		{"empty output is 204", "DELETE", "/items/7", "", 204, ``},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := s.do(t, tt.method, tt.path, tt.body, nil)
			if r.status != tt.status || string(r.body) != tt.want {
				t.Fatalf("%s %s = %d %s, want %d %s", tt.method, tt.path, r.status, r.body, tt.status, tt.want)
			}
			if tt.status != 204 && !strings.HasPrefix(r.header.Get("Content-Type"), "application/json") {
				t.Errorf("Content-Type = %q, want application/json", r.header.Get("Content-Type"))
			}
		})
	}
	app.mu.Lock()
	got := app.lastGet
	app.mu.Unlock()
	if got.ID != 7 || !got.Verbose || got.Limit == nil || *got.Limit != 5 {
		t.Errorf("items.get input = %+v (limit %v), want ID 7, Verbose, Limit 5", got, got.Limit)
	}
}

func TestServeSuccessStatusOverride(t *testing.T) {
	reg := operations.NewRegistry()
	if err := operations.Register(reg, operations.Descriptor{ID: "jobs.start", Method: "POST", Path: "/jobs", SuccessStatus: 202},
		func(context.Context, struct{}) (struct{}, error) { return struct{}{}, nil }); err != nil {
		t.Fatal(err)
	}
	k, err := kernel.New(kernel.WithRegistry(reg))
	if err != nil {
		t.Fatal(err)
	}
	e := echo.New()
	if _, err := httpadapter.Mount(e, k); err != nil {
		t.Fatal(err)
	}
	s := serveEcho(t, e)
	r := s.do(t, "POST", "/jobs", "", nil)
	if r.status != 202 || string(r.body) != "{}" {
		t.Fatalf("POST /jobs = %d %s, want 202 {}", r.status, r.body)
	}
}

func TestServeNotFoundOutcome(t *testing.T) {
	s := startServer(t, newTestApp(), serverOpts{})
	r := s.do(t, "GET", "/items/404", "", nil)
	checkProblem(t, r, 404, "NOT_FOUND", "TEST_NOT_FOUND_001", "/items/404")
	if d := details(r); d["id"] != float64(404) {
		t.Errorf("details = %v, want id 404", d)
	}
	if r.problem["detail"] != "no such item" {
		t.Errorf("detail = %v, want the outcome's message", r.problem["detail"])
	}
}

func TestServeBindingErrors(t *testing.T) {
	app := newTestApp()
	s := startServer(t, app, serverOpts{})
	tests := []struct {
		name, method, path, body string
		code                     string
		field                    any // nil: no field member
		expected                 any
	}{
		{"malformed json names the member", "POST", "/items", `{"name": "a", "qty": 12a}`, httpadapter.CodeMalformedBody, "qty", nil},
		{"truncated json", "POST", "/items", `{"name": "a"`, httpadapter.CodeMalformedBody, "name", nil},
		{"not json at all", "POST", "/items", `name=a`, httpadapter.CodeMalformedBody, nil, nil},
		{"trailing garbage", "POST", "/items", `{"name":"a"} x`, httpadapter.CodeMalformedBody, nil, nil},
		{"wrong type", "POST", "/items", `{"name":"a","qty":"two"}`, httpadapter.CodeWrongType, "qty", "integer"},
		{"fraction for an integer", "POST", "/items", `{"name":"a","qty":1.5}`, httpadapter.CodeWrongType, "qty", "integer"},
		{"overflowing number", "POST", "/items", `{"name":"a","qty":1e400}`, httpadapter.CodeWrongType, "qty", "integer"},
		{"nested wrong type", "POST", "/items", `{"name":"a","tags":[{"label":5}]}`, httpadapter.CodeWrongType, "tags.label", "string"},
		{"array instead of object", "POST", "/items", `[1,2]`, httpadapter.CodeWrongType, "", "object"},
		{"failed validation", "POST", "/items", `{"qty":1}`, "TEST_VALIDATION_001", "name", nil},
		{"path parameter wrong type", "GET", "/items/abc", "", httpadapter.CodeWrongType, "id", "integer"},
		{"query parameter wrong type", "GET", "/items/1?limit=x", "", httpadapter.CodeWrongType, "limit", "integer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := app.calls.Load()
			r := s.do(t, tt.method, tt.path, tt.body, nil)
			instance, _, _ := strings.Cut(tt.path, "?")
			checkProblem(t, r, 400, "VALIDATION", tt.code, instance)
			d := details(r)
			if f, ok := d["field"]; ok != (tt.field != nil) || f != tt.field {
				t.Errorf("details.field = %v (present %v), want %v; body %s", f, ok, tt.field, r.body)
			}
			if tt.expected != nil && d["expected"] != tt.expected {
				t.Errorf("details.expected = %v, want %v", d["expected"], tt.expected)
			}
			if strings.Contains(string(r.body), "Go struct") || strings.Contains(string(r.body), "httpadapter_test") {
				t.Errorf("body leaks Go type names: %s", r.body)
			}
			if app.calls.Load() != before {
				t.Errorf("handler ran for a request that failed binding")
			}
		})
	}
}

func TestServeBodyLimit(t *testing.T) {
	app := newTestApp()
	s := startServer(t, app, serverOpts{adapter: []httpadapter.Option{httpadapter.WithBodyLimit(64)}})
	big := `{"name":"` + strings.Repeat("x", 100) + `"}`
	tests := []struct {
		name    string
		chunked bool
	}{
		{"content length over the limit", false},
		{"chunked body over the limit", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var body io.Reader = strings.NewReader(big)
			if tt.chunked {
				body = io.MultiReader(body) // hides the length: sent chunked
			}
			req, _ := http.NewRequest("POST", s.url+"/items", body)
			r := s.send(t, req)
			checkProblem(t, r, 413, "VALIDATION", httpadapter.CodeBodyTooLarge, "/items")
			if d := details(r); d["limit"] != float64(64) {
				t.Errorf("details = %v, want limit 64", d)
			}
		})
	}
	if n := app.calls.Load(); n != 0 {
		t.Errorf("handler ran %d times for oversized bodies", n)
	}
	if r := s.do(t, "POST", "/items", `{"name":"ok"}`, nil); r.status != 201 {
		t.Errorf("POST /items with a small body = %d %s, want 201", r.status, r.body)
	}
}

func TestServeUnexpectedSaysNothing(t *testing.T) {
	app := newTestApp()
	s := startServer(t, app, serverOpts{})
	for _, path := range []string{"/fail", "/panic"} {
		t.Run(path, func(t *testing.T) {
			r := s.do(t, "POST", path, "", nil)
			checkProblem(t, r, 500, "UNEXPECTED", pipeline.CodeUnexpected, path)
			if r.problem["detail"] != pipeline.UnexpectedMessage {
				t.Errorf("detail = %q, want %q", r.problem["detail"], pipeline.UnexpectedMessage)
			}
			if len(details(r)) != 0 {
				t.Errorf("details = %v, want {}", details(r))
			}
			for _, secret := range []string{"hunter2", "secret panic text"} {
				if strings.Contains(string(r.body), secret) {
					t.Errorf("body leaks %q: %s", secret, r.body)
				}
			}
		})
	}
	// The process lives on, and the log has what the caller did not get.
	if r := s.do(t, "POST", "/items", `{"name":"a"}`, nil); r.status != 201 {
		t.Errorf("after a panic, POST /items = %d, want 201", r.status)
	}
	rec := s.logs.waitRecord(t, "http request", "path", "/fail", 0)
	if msg, _ := rec.Attrs["error"].(string); rec.Level != slog.LevelError || !strings.Contains(msg, "hunter2") {
		t.Errorf("access record of /fail = %v, want level ERROR with the internal error", rec)
	}
}

func TestEchoErrorsAreProblems(t *testing.T) {
	s := startServer(t, newTestApp(), serverOpts{routes: func(e *echo.Echo, a *httpadapter.Adapter) {
		e.GET("/forbidden", func(c echo.Context) error { return echo.NewHTTPError(http.StatusForbidden, "not yours") })
		e.GET("/broken", func(c echo.Context) error { return errors.New("internal: disk /dev/sda1 failed") })
		e.GET("/coded", func(c echo.Context) error {
			return pipeline.NewError(pipeline.KindConflict, "TEST_CONFLICT_001", "already there").WithDetail("id", "x")
		})
	}})
	tests := []struct {
		name, method, path string
		status             int
		kind, code         string
		detail             string
	}{
		{"no route", "GET", "/nope", 404, "NOT_FOUND", httpadapter.CodeRouteNotFound, "Not Found"},
		{"wrong method", "PUT", "/items", 405, "NOT_FOUND", httpadapter.CodeMethodNotAllowed, "Method Not Allowed"},
		{"app HTTPError keeps its status", "GET", "/forbidden", 403, "FORBIDDEN", httpadapter.CodeBadRequest, "not yours"},
		{"app plain error", "GET", "/broken", 500, "UNEXPECTED", pipeline.CodeUnexpected, pipeline.UnexpectedMessage},
		{"app pipeline error", "GET", "/coded", 409, "CONFLICT", "TEST_CONFLICT_001", "already there"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := s.do(t, tt.method, tt.path, "", nil)
			checkProblem(t, r, tt.status, tt.kind, tt.code, tt.path)
			if r.problem["detail"] != tt.detail {
				t.Errorf("detail = %q, want %q", r.problem["detail"], tt.detail)
			}
			if strings.Contains(string(r.body), "sda1") {
				t.Errorf("body leaks the internal error: %s", r.body)
			}
		})
	}
	if r := s.do(t, "PUT", "/items", "", nil); !strings.Contains(r.header.Get("Allow"), "POST") {
		t.Errorf("405 Allow = %q, want it to list POST", r.header.Get("Allow"))
	}
	if rec := s.logs.waitRecord(t, "http request", "path", "/nope", 0); rec.Attrs["status"] != int64(404) || rec.Attrs["code"] != httpadapter.CodeRouteNotFound || rec.Attrs["operation"] != "" {
		t.Errorf("access record of /nope = %v, want status 404, code %s, no operation", rec, httpadapter.CodeRouteNotFound)
	}
	if rec := s.logs.waitRecord(t, "http request", "path", "/broken", 0); rec.Attrs["operation"] != "GET /broken" || rec.Level != slog.LevelError {
		t.Errorf("access record of /broken = %v, want operation \"GET /broken\" at level ERROR", rec)
	}
}

func TestMountErrors(t *testing.T) {
	tests := []struct {
		name     string
		register func(reg *operations.Registry) error
		want     string
	}{
		{"two operations on one route", func(reg *operations.Registry) error {
			if err := operations.Register(reg, operations.Descriptor{ID: "a.one", Method: "GET", Path: "/x"},
				func(context.Context, struct{}) (struct{}, error) { return struct{}{}, nil }); err != nil {
				return err
			}
			return operations.Register(reg, operations.Descriptor{ID: "a.two", Method: "GET", Path: "/x"},
				func(context.Context, struct{}) (struct{}, error) { return struct{}{}, nil })
		}, `operations "a.one" and "a.two" are both mounted on GET /x`},
		{"path parameter without a field", func(reg *operations.Registry) error {
			return operations.Register(reg, operations.Descriptor{ID: "a.get", Method: "GET", Path: "/x/:slug"},
				func(context.Context, struct{ ID string }) (struct{}, error) { return struct{}{}, nil })
		}, `operation "a.get" (GET /x/:slug): path parameter "slug" has no field`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := operations.NewRegistry()
			if err := tt.register(reg); err != nil {
				t.Fatal(err)
			}
			k, err := kernel.New(kernel.WithRegistry(reg))
			if err != nil {
				t.Fatal(err)
			}
			_, err = httpadapter.Mount(echo.New(), k)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Mount() = %v, want an error containing %q", err, tt.want)
			}
		})
	}
	if _, err := httpadapter.Mount(nil, nil); err == nil {
		t.Error("Mount(nil, nil) = nil error, want one")
	}
}

func TestWrapHostEndpoint(t *testing.T) {
	s := startServer(t, newTestApp(), serverOpts{routes: func(e *echo.Echo, a *httpadapter.Adapter) {
		e.GET("/healthz", a.Wrap(func(c echo.Context) error {
			if _, ok := c.Request().Context().Deadline(); !ok {
				return c.String(500, "no deadline on the host endpoint's context")
			}
			return c.String(200, "ok")
		}))
		e.GET("/teapot", a.Wrap(func(c echo.Context) error { return echo.NewHTTPError(http.StatusTeapot) }))
	}})
	if r := s.do(t, "GET", "/healthz", "", nil); r.status != 200 || string(r.body) != "ok" {
		t.Errorf("GET /healthz = %d %s, want 200 ok", r.status, r.body)
	}
	r := s.do(t, "GET", "/healthz", "", map[string]string{httpadapter.HeaderDeadline: "soon"})
	checkProblem(t, r, 400, "VALIDATION", "KERNEL_VALIDATION_002", "/healthz")
	r = s.do(t, "GET", "/healthz", "", map[string]string{httpadapter.HeaderDeadline: "2001-01-01T00:00:00Z"})
	checkProblem(t, r, 504, "TIMEOUT", pipeline.CodeTimeout, "/healthz")
	r = s.do(t, "GET", "/teapot", "", nil)
	checkProblem(t, r, 418, "VALIDATION", httpadapter.CodeBadRequest, "/teapot")
	if rec := s.logs.waitRecord(t, "http request", "path", "/teapot", 0); rec.Attrs["operation"] != "GET /teapot" || rec.Attrs["status"] != int64(418) {
		t.Errorf("access record = %v, want the host route %q, status 418", rec.Attrs, "GET /teapot")
	}
}

func TestAccessLog(t *testing.T) {
	s := startServer(t, newTestApp(), serverOpts{})
	s.do(t, "POST", "/items", `{"name":"a"}`, nil)
	s.do(t, "GET", "/items/404", "", nil)
	tests := []struct {
		path   string
		op     string
		status int64
		code   string
	}{
		{"/items", "items.create", 201, ""},
		{"/items/404", "items.get", 404, "TEST_NOT_FOUND_001"},
	}
	for _, tt := range tests {
		rec := s.logs.waitRecord(t, "http request", "path", tt.path, 0)
		if rec.Time.IsZero() || rec.Level != slog.LevelInfo {
			t.Errorf("access record of %s: time %v, level %v, want a time and INFO", tt.path, rec.Time, rec.Level)
		}
		for _, k := range []string{"operation", "method", "path", "status", "code", "durationMs", "traceId"} {
			if _, ok := rec.Attrs[k]; !ok {
				t.Errorf("access record of %s lacks %q: %v", tt.path, k, rec.Attrs)
			}
		}
		if rec.Attrs["operation"] != tt.op || rec.Attrs["status"] != tt.status || rec.Attrs["code"] != tt.code {
			t.Errorf("access record of %s = %v, want operation %s status %v code %q", tt.path, rec.Attrs, tt.op, tt.status, tt.code)
		}
		if n := len(s.logs.Find(func(r pipelinetest.Record) bool { return r.Message == "http request" && r.Attrs["path"] == tt.path })); n != 1 {
			t.Errorf("%d access records of %s, want 1", n, tt.path)
		}
	}
}

func TestBaggage(t *testing.T) {
	app := newTestApp()
	s := startServer(t, app, serverOpts{adapter: []httpadapter.Option{httpadapter.WithBaggageLimit(64)}})
	r := s.do(t, "POST", "/baggage", "", map[string]string{"Baggage": "tenant=acme,region=eu", "Idempotency-Key": `"k-1"`})
	if r.status != 200 {
		t.Fatalf("POST /baggage = %d %s", r.status, r.body)
	}
	app.mu.Lock()
	got, key, ctxKey := app.baggage, app.idemKey, app.ctxIdemKey
	app.mu.Unlock()
	if got["tenant"] != "acme" || got["region"] != "eu" {
		t.Errorf("baggage = %v, want tenant and region", got)
	}
	if key != "k-1" || ctxKey != "k-1" {
		t.Errorf("idempotency key = %q, in the handler's context %q; want the header's k-1 in both", key, ctxKey)
	}

	r = s.do(t, "POST", "/baggage", "", map[string]string{"Baggage": "tenant=" + strings.Repeat("x", 100)})
	if r.status != 200 {
		t.Fatalf("POST /baggage with oversized baggage = %d %s, want 200", r.status, r.body)
	}
	app.mu.Lock()
	got = app.baggage
	app.mu.Unlock()
	if len(got) != 0 {
		t.Errorf("oversized baggage reached the invocation: %v", got)
	}
	rec := s.logs.waitRecord(t, "httpadapter: baggage header dropped", "operation", "work.baggage", 0)
	if rec.Attrs["bytes"] != int64(107) || rec.Attrs["limit"] != int64(64) {
		t.Errorf("dropped-baggage record = %v, want bytes 107 limit 64", rec.Attrs)
	}
}

func TestTraceIDFromTraceparent(t *testing.T) {
	s := startServer(t, newTestApp(), serverOpts{})
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	r := s.do(t, "GET", "/items/404", "", map[string]string{"Traceparent": "00-" + traceID + "-00f067aa0ba902b7-01"})
	checkProblem(t, r, 404, "NOT_FOUND", "TEST_NOT_FOUND_001", "/items/404")
	if r.problem["traceId"] != traceID {
		t.Errorf("traceId = %v, want the caller's %s", r.problem["traceId"], traceID)
	}
	if rec := s.logs.waitRecord(t, "http request", "path", "/items/404", 0); rec.Attrs["traceId"] != traceID {
		t.Errorf("access record traceId = %v, want %s", rec.Attrs["traceId"], traceID)
	}
	if r := s.do(t, "GET", "/items/404", "", nil); r.problem["traceId"] != "" {
		t.Errorf("without a trace: traceId = %v, want \"\"", r.problem["traceId"])
	}
}

// TestIdempotencyKeyHeader: the Idempotency-Key header is a structured-field
// string of at most 255 characters (draft-ietf-httpapi-idempotency-key-header).
// On an operation that takes keys anything else is a 400
// KERNEL_VALIDATION_005 and nothing runs; on one that does not, a
// malformed key (a bare UUID, say) is ignored — the call runs without it,
// and it is not passed on as baggage — while a well-formed one is still
// passed on.
func TestIdempotencyKeyHeader(t *testing.T) {
	for _, enabled := range []bool{false, true} {
		app := newTestApp()
		so := serverOpts{}
		if enabled {
			so.config = `{"Sundial": {"Kernel": {"Resilience": {"Operations": {"work.baggage": {"Idempotency": {}}}}}}}`
		}
		s := startServer(t, app, so)
		for _, tc := range []struct {
			header    string
			malformed bool
			key       string
		}{
			{`"k-1"`, false, "k-1"},
			{`"a \"quoted\" \\ key"`, false, `a "quoted" \ key`},
			{`k-1`, true, ""},
			{`8e03978e-40d5-43e8-bc93-6894a57f9324`, true, ""},
			{`"unterminated`, true, ""},
			{`"bad \n escape"`, true, ""},
			{`""`, true, ""},
			{`"` + strings.Repeat("x", 256) + `"`, true, ""},
			{`"` + strings.Repeat("x", 600) + `"`, true, ""},
			{`"` + strings.Repeat("x", 255) + `"`, false, strings.Repeat("x", 255)},
		} {
			app.mu.Lock()
			app.idemKey, app.ctxIdemKey = "unset", "unset"
			app.mu.Unlock()
			r := s.do(t, "POST", "/baggage", "", map[string]string{"Idempotency-Key": tc.header})
			want := 200
			if tc.malformed && enabled {
				want = 400
			}
			if r.status != want {
				t.Errorf("keys on %v, Idempotency-Key %.40s: %d %s, want %d", enabled, tc.header, r.status, r.body, want)
				continue
			}
			app.mu.Lock()
			key, ctxKey := app.idemKey, app.ctxIdemKey
			app.mu.Unlock()
			if want == 400 {
				if !strings.Contains(string(r.body), "KERNEL_VALIDATION_005") {
					t.Errorf("keys on, Idempotency-Key %.40s: %s, want %s", tc.header, r.body, "KERNEL_VALIDATION_005")
				}
				if key != "unset" {
					t.Errorf("keys on, Idempotency-Key %.40s: the handler ran (key %q), want nothing run", tc.header, key)
				}
				continue
			}
			if key != tc.key || ctxKey != tc.key {
				t.Errorf("keys on %v, Idempotency-Key %.40s: key %q, in the handler's context %q; want %q in both", enabled, tc.header, key, ctxKey, tc.key)
			}
		}
	}
}

// TestIdempotencyFingerprintCoversFieldsHiddenFromJSON: items.get's limit
// comes from the query into a field tagged json:"-"; the same key with
// another limit is another request (422), not a replay of the first.
func TestIdempotencyFingerprintCoversFieldsHiddenFromJSON(t *testing.T) {
	app := newTestApp()
	s := startServer(t, app, serverOpts{config: `{"Sundial": {"Kernel": {"Resilience": {"Operations": {"items.get": {"Idempotency": {}}}}}}}`})
	h := map[string]string{"Idempotency-Key": `"k-hidden"`}
	if r := s.do(t, "GET", "/items/1?limit=1", "", h); r.status != 200 {
		t.Fatalf("first call: %d %s", r.status, r.body)
	}
	if r := s.do(t, "GET", "/items/1?limit=1", "", h); r.status != 200 || r.header.Get(idempotency.FieldReplayed) != "true" {
		t.Fatalf("same query: %d %v %s, want the replay", r.status, r.header, r.body)
	}
	if r := s.do(t, "GET", "/items/1?limit=2", "", h); r.status != http.StatusUnprocessableEntity {
		t.Fatalf("same key, limit=2: %d %s, want 422", r.status, r.body)
	}
	if n := app.calls.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
}
