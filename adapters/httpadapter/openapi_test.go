package httpadapter_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/labstack/echo/v4"

	"github.com/sundial-go/sundial/adapters/httpadapter"
	"github.com/sundial-go/sundial/operations"
)

// TestOpenAPICoversEveryRoute builds the OpenAPI document of the test
// app, serves it, loads what was served with kin-openapi's loader and
// validates it (OpenAPI 3.1); then checks that every route echo has for an
// operation is in it, with its path and query parameters, the deadline
// headers under the adapter's configured name, and the Problem Details
// answers its policy can produce: 503 with Retry-After only for the
// operations that have limits, and what the Operation hook adds.
func TestOpenAPICoversEveryRoute(t *testing.T) {
	app := newTestApp()
	hooked := map[string]bool{}
	s, doc := serveOpenAPI(t, app, serverOpts{adapter: []httpadapter.Option{httpadapter.WithRelativeDeadlineHeader("X-Timeout-Ms")}},
		httpadapter.OpenAPIInfo{Title: "test", Version: "1",
			Operation: func(d *operations.Descriptor, op *openapi3.Operation) {
				hooked[d.ID] = true
				if d.ID == "items.create" {
					op.AddResponse(http.StatusConflict, openapi3.NewResponse().WithDescription("idempotency: the key is in use"))
				}
			}})
	if err := doc.Validate(t.Context()); err != nil {
		t.Fatalf("the served document does not validate: %v", err)
	}
	ops := 0
	for _, r := range s.echo.Routes() {
		if r.Path == "/openapi.json" || r.Method == echo.RouteNotFound || !strings.HasPrefix(r.Name, "github.com/sundial-go/sundial/adapters/httpadapter.") {
			continue // not an operation's route
		}
		ops++
		path := r.Path
		for _, p := range []string{":id"} {
			path = strings.ReplaceAll(path, p, "{id}")
		}
		item := doc.Paths.Find(path)
		if item == nil || item.GetOperation(r.Method) == nil {
			t.Errorf("route %s %s is not in the document", r.Method, r.Path)
			continue
		}
		op := item.GetOperation(r.Method)
		if !hooked[op.OperationID] {
			t.Errorf("%s: the Operation hook was not called", op.OperationID)
		}
		if op.Parameters.GetByInAndName("header", "X-Timeout-Ms") == nil || op.Parameters.GetByInAndName("header", httpadapter.HeaderDeadline) == nil {
			t.Errorf("%s: deadline headers missing", op.OperationID)
		}
		limited := op.OperationID == "work.run" || op.OperationID == "items.create"
		if r503 := op.Responses.Status(503); (r503 != nil) != limited {
			t.Errorf("%s: 503 response %v, want present %v (limits)", op.OperationID, r503 != nil, limited)
		} else if limited && r503.Value.Headers["Retry-After"] == nil {
			t.Errorf("%s: 503 without Retry-After", op.OperationID)
		}
	}
	if ops < 5 {
		t.Fatalf("found %d operation routes in echo, want the test app's", ops)
	}
	get := doc.Paths.Find("/items/{id}").Get
	if p := get.Parameters.GetByInAndName("path", "id"); p == nil || !p.Schema.Value.Type.Is(openapi3.TypeInteger) {
		t.Errorf("GET /items/{id}: path parameter id = %v, want an integer", p)
	}
	if p := get.Parameters.GetByInAndName("query", "limit"); p == nil {
		t.Errorf("GET /items/{id}: no query parameter limit")
	}
	if doc.Paths.Find("/items").Post.Responses.Status(409) == nil {
		t.Error("POST /items: the hook's 409 is missing")
	}
	if _, ok := doc.Paths.Find("/items").Post.Responses.Status(201).Value.Content["application/json"]; !ok {
		t.Error("POST /items: no JSON 201")
	}
	// The strict input policy closes the request body.
	schema := doc.Paths.Find("/items").Post.RequestBody.Value.Content.Get("application/json").Schema.Value
	if schema.AdditionalProperties.Has == nil || *schema.AdditionalProperties.Has {
		t.Errorf("POST /items body schema allows unknown properties under a strict input policy")
	}
}

// TestOpenAPIIdempotencyKeyHeader: the Idempotency-Key parameter describes
// the raw header value, a quoted sf-string — its schema accepts the
// longest valid key, quoted (257 characters) and fully escaped (512), and
// refuses the unquoted form — and its description says what each
// operation does with a malformed key: 400 where keys are on, ignored
// where they are off.
func TestOpenAPIIdempotencyKeyHeader(t *testing.T) {
	app := newTestApp()
	s := startServer(t, app, serverOpts{config: `{"Sundial": {"Kernel": {"Resilience": {"Operations": {"work.baggage": {"Idempotency": {}}}}}}}`})
	doc, err := s.adapter.OpenAPI(httpadapter.OpenAPIInfo{Title: "test", Version: "1"})
	if err != nil {
		t.Fatal(err)
	}
	for path, enabled := range map[string]bool{"/baggage": true, "/items": false} {
		p := doc.Paths.Find(path).Post.Parameters.GetByInAndName("header", "Idempotency-Key")
		if p == nil {
			t.Fatalf("POST %s: no Idempotency-Key parameter", path)
		}
		if strings.Contains(p.Description, "ignored") == enabled || !strings.Contains(p.Description, "sf-string") ||
			strings.Contains(p.Description, "400 KERNEL_VALIDATION_005") != enabled {
			t.Errorf("POST %s (keys on %v): description %q", path, enabled, p.Description)
		}
		sc := p.Schema.Value
		for v, ok := range map[string]bool{
			`"k-1"`:                                true,
			`"a \"quoted\" \\ key"`:                true,
			`"` + strings.Repeat("x", 255) + `"`:   true,
			`"` + strings.Repeat(`\\`, 255) + `"`:  true,
			`k-1`:                                  false,
			`8e03978e-40d5-43e8-bc93-6894a57f9324`: false,
			`""`:                                   false,
			`"bad \n escape"`:                      false,
			`"` + strings.Repeat(`\\`, 256) + `"`:  false,
			"\"caf\u00e9\"":                        false,
		} {
			if err := sc.VisitJSON(v); (err == nil) != ok {
				t.Errorf("POST %s: Idempotency-Key %.40s (%d chars): schema error %v, want valid %v", path, v, len(v), err, ok)
			}
		}
	}
}

// TestOpenAPIAdaptiveConcurrency: an adaptive concurrency limit is a 503
// the document describes; a shadow controller alone rejects nothing, so
// it adds none.
func TestOpenAPIAdaptiveConcurrency(t *testing.T) {
	_, doc := serveOpenAPI(t, newTestApp(), serverOpts{config: `{"Sundial": {"Kernel": {"Resilience": {"Operations": {
		"items.get": {"ConcurrencyLimit": "adaptive"},
		"items.delete": {"Adaptive": {"Shadow": true}}}}}}}`}, httpadapter.OpenAPIInfo{Title: "test", Version: "1"})
	item := doc.Paths.Find("/items/{id}")
	if r := item.Get.Responses.Status(503); r == nil || !strings.Contains(*r.Value.Description, "concurrency limited (adaptive)") {
		t.Errorf("items.get: 503 = %v; want one saying the adaptive concurrency limit", r)
	}
	if r := item.Delete.Responses.Status(503); r != nil {
		t.Errorf("items.delete (shadow only): 503 = %v; want none", *r.Value.Description)
	}
}

// serveOpenAPI starts app's server with so, serving its OpenAPI document
// of info at /openapi.json, and returns the server and the document as
// served.
func serveOpenAPI(t *testing.T, app *testApp, so serverOpts, info httpadapter.OpenAPIInfo) (*server, *openapi3.T) {
	t.Helper()
	so.routes = func(e *echo.Echo, a *httpadapter.Adapter) {
		h, err := a.OpenAPIHandler(info)
		if err != nil {
			t.Fatal(err)
		}
		e.GET("/openapi.json", h)
	}
	s := startServer(t, app, so)
	resp, err := s.client.Get(s.url + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	doc, err := openapi3.NewLoader().LoadFromData(body)
	if err != nil {
		t.Fatal(err)
	}
	return s, doc
}

// TestOpenAPIPriorityHeader: each operation documents the Sundial-Priority
// header as an enum of the three classes, naming the operation's own.
func TestOpenAPIPriorityHeader(t *testing.T) {
	app := newTestApp()
	s := startServer(t, app, serverOpts{config: `{"Sundial": {"Kernel": {"Resilience": {"Operations": {"work.baggage": {"Priority": "critical"}}}}}}`})
	doc, err := s.adapter.OpenAPI(httpadapter.OpenAPIInfo{Title: "test", Version: "1"})
	if err != nil {
		t.Fatal(err)
	}
	for path, class := range map[string]string{"/baggage": "critical", "/items": "default"} {
		p := doc.Paths.Find(path).Post.Parameters.GetByInAndName("header", httpadapter.HeaderPriority)
		if p == nil {
			t.Fatalf("POST %s: no %s parameter", path, httpadapter.HeaderPriority)
		}
		if !strings.Contains(p.Description, "("+class+")") || !strings.Contains(p.Description, "KERNEL_VALIDATION_009") {
			t.Errorf("POST %s: description %q, want the class %s and the 400", path, p.Description, class)
		}
		for v, ok := range map[string]bool{"critical": true, "default": true, "sheddable": true, "urgent": false} {
			if err := p.Schema.Value.VisitJSON(v); (err == nil) != ok {
				t.Errorf("POST %s: %s %q: schema error %v, want valid %v", path, httpadapter.HeaderPriority, v, err, ok)
			}
		}
	}
}

// TestOpenAPIPerKeyAndShadow: a per-key limit alone is a 503 the document
// describes; an operation in shadow mode rejects nothing, so it has none.
func TestOpenAPIPerKeyAndShadow(t *testing.T) {
	_, doc := serveOpenAPI(t, newTestApp(), serverOpts{config: `{"Sundial": {"Kernel": {"Resilience": {"Operations": {
		"items.get": {"PerKey": {"PermitLimit": 10}},
		"items.delete": {"PermitLimit": 1, "Shadow": true}}}}}}`}, httpadapter.OpenAPIInfo{Title: "test", Version: "1"})
	item := doc.Paths.Find("/items/{id}")
	if r := item.Get.Responses.Status(503); r == nil || !strings.Contains(*r.Value.Description, "rate limited per key (10 per") {
		t.Errorf("items.get: 503 = %v; want one saying the per-key limit", r)
	}
	if r := item.Delete.Responses.Status(503); r != nil {
		t.Errorf("items.delete (shadow): 503 = %v; want none", *r.Value.Description)
	}
}
