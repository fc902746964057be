package systemtest

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/sundial-go/sundial/adapters/httpadapter"
	"github.com/sundial-go/sundial/samples/shop/internal/shopcmd"
)

// TestShopServesOpenAPI fetches /openapi.json from the shop over a real
// listener, loads it with kin-openapi's loader and validates it as
// OpenAPI 3.1; checks that every operation the shop mounts is in it with
// its parameters, deadline headers and Problem Details answers; and sends
// a real request of each shop operation, validating the request and the
// shop's response against the document (openapi3filter) — including a
// Problem Details failure (docs/http.md, "OpenAPI").
func TestShopServesOpenAPI(t *testing.T) {
	s := startShopHTTP(t, shopcmd.ServeOptions{})
	resp, err := s.client.Get(s.url + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		t.Fatalf("GET /openapi.json = %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	doc, err := openapi3.NewLoader().LoadFromData(body)
	if err != nil {
		t.Fatalf("loading /openapi.json: %v", err)
	}
	if err := doc.Validate(t.Context()); err != nil {
		t.Fatalf("/openapi.json does not validate: %v\n%s", err, body)
	}
	if doc.OpenAPI != "3.1.0" {
		t.Errorf("openapi = %q, want 3.1.0", doc.OpenAPI)
	}
	// What redocly's recommended rules ask of the application.
	if l := doc.Info.License; l == nil || l.Name != "MIT" || l.Identifier != "MIT" {
		t.Errorf("info.license = %+v, want MIT", l)
	}
	if len(doc.Servers) != 1 || doc.Servers[0].URL != "/" {
		t.Errorf("servers = %+v, want the one that serves the document, /", doc.Servers)
	}

	// The idempotency answers where keys are enabled (orders.create and
	// billing.charge in the shop's config), and only there.
	for path, want := range map[string]bool{"/orders": true, "/billing/charge": true, "/reports/export": false} {
		op := doc.Paths.Find(path).Post
		got := op.Responses.Status(409) != nil && op.Responses.Status(422) != nil
		if got != want {
			t.Errorf("POST %s: 409/422 documented = %v, want %v", path, got, want)
		}
		if want && op.Responses.Status(409).Value.Headers["Retry-After"] == nil {
			t.Errorf("POST %s: 409 without Retry-After", path)
		}
	}

	// Every route the shop's operations are mounted on.
	reg, err := shopcmd.NewRegistry()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range reg.All() {
		if d.Method == "" {
			continue
		}
		path := strings.ReplaceAll(d.Path, ":id", "{id}")
		item := doc.Paths.Find(path)
		if item == nil || item.GetOperation(d.Method) == nil {
			t.Errorf("%s %s (%s) is not in the document", d.Method, path, d.ID)
			continue
		}
		op := item.GetOperation(d.Method)
		if op.OperationID != d.ID {
			t.Errorf("%s %s: operationId %q, want %q", d.Method, path, op.OperationID, d.ID)
		}
		for _, h := range []string{httpadapter.HeaderDeadline, httpadapter.DefaultRelativeDeadlineHeader} {
			if op.Parameters.GetByInAndName("header", h) == nil {
				t.Errorf("%s: no %s header parameter", d.ID, h)
			}
		}
		for _, st := range []int{400, 408, 500, 504} {
			if r := op.Responses.Status(st); r == nil || r.Value.Content.Get(httpadapter.ContentTypeProblem) == nil {
				t.Errorf("%s: no %d Problem Details response", d.ID, st)
			}
		}
	}
	// The shop's policies: orders.create is rate limited, billing.charge has
	// a breaker, reports.export a concurrency limit: 503 with Retry-After.
	for _, p := range []string{"/orders", "/billing/charge", "/reports/export"} {
		r := doc.Paths.Find(p).Post.Responses.Status(503)
		if r == nil || r.Value.Headers["Retry-After"] == nil {
			t.Errorf("POST %s: no 503 with Retry-After", p)
		}
	}

	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	exchange := func(method, path, reqBody string, wantStatus int, reqValid bool) {
		t.Helper()
		req, err := http.NewRequest(method, s.url+path, strings.NewReader(reqBody))
		if err != nil {
			t.Fatal(err)
		}
		if reqBody != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		req.Header.Set(httpadapter.DefaultRelativeDeadlineHeader, "5000")
		// Route and validate the request as the document describes it.
		vreq := req.Clone(context.Background())
		vreq.Body = io.NopCloser(strings.NewReader(reqBody))
		u, _ := url.Parse(path)
		vreq.URL = u
		vreq.URL.Scheme, vreq.URL.Host = "", ""
		route, params, err := router.FindRoute(vreq)
		if err != nil {
			t.Fatalf("%s %s: not routed by the document: %v", method, path, err)
		}
		in := &openapi3filter.RequestValidationInput{Request: vreq, PathParams: params, Route: route}
		if err := openapi3filter.ValidateRequest(t.Context(), in); (err == nil) != reqValid {
			t.Errorf("%s %s %s: request validation = %v, want valid %v", method, path, reqBody, err, reqValid)
		}
		resp, err := s.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != wantStatus {
			t.Errorf("%s %s = %d %s, want %d", method, path, resp.StatusCode, body, wantStatus)
		}
		out := &openapi3filter.ResponseValidationInput{
			RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header, Body: io.NopCloser(bytes.NewReader(body)),
			Options: &openapi3filter.Options{IncludeResponseStatus: true},
		}
		if err := openapi3filter.ValidateResponse(t.Context(), out); err != nil {
			t.Errorf("%s %s = %d %s: response does not validate: %v", method, path, resp.StatusCode, body, err)
		}
	}
	exchange(http.MethodPost, "/orders", `{"name":"lamp","amount":2}`, http.StatusCreated, true)
	exchange(http.MethodGet, "/orders/ord-1", "", http.StatusOK, true)
	exchange(http.MethodGet, "/orders/ord-9", "", http.StatusNotFound, true)
	exchange(http.MethodPost, "/reports/export", `{"delayMs":0}`, http.StatusOK, true)
	exchange(http.MethodPost, "/billing/charge", `{"amount":5}`, http.StatusOK, true)
	// The input policy rejects unknown fields, and so does the document
	// (additionalProperties: false): the validator answers as the server.
	exchange(http.MethodPost, "/billing/charge", `{"amount":5,"extra":true}`, http.StatusBadRequest, false)
	exchange(http.MethodPost, "/reports/export", `{"delayMs":"x"}`, http.StatusBadRequest, false)
}
