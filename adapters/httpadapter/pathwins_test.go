package httpadapter_test

import (
	"context"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/labstack/echo/v4"

	"github.com/sundial-go/sundial/adapters/httpadapter"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
)

// TestPathParameterIsNeverReadFromQuery: a field a path parameter fills
// keeps the path's value whatever the query says — by JSON name on GET
// and DELETE, and by an explicit query tag on any method — and a query
// value of the wrong type for it is not read at all (docs/http.md, "From
// request to input").
func TestPathParameterIsNeverReadFromQuery(t *testing.T) {
	app := newTestApp()
	s := startServer(t, app, serverOpts{})
	for _, path := range []string{"/items/7?id=9", "/items/7?id=abc", "/items/7?id=9&id=10&limit=5"} {
		if r := s.do(t, "GET", path, "", nil); r.status != 200 {
			t.Fatalf("GET %s = %d %s, want 200", path, r.status, r.body)
		}
		app.mu.Lock()
		got := app.lastGet
		app.mu.Unlock()
		if got.ID != 7 {
			t.Errorf("GET %s: handler saw id %d, want the path's 7", path, got.ID)
		}
	}

	type tagged struct {
		Ref  string `param:"ref" query:"ref" json:"ref"`
		Note string `query:"note" json:"note"`
	}
	reg := operations.NewRegistry()
	seen := make(chan tagged, 1)
	if err := operations.Register(reg, operations.Descriptor{ID: "refs.touch", Method: "POST", Path: "/refs/:ref"},
		func(_ context.Context, in tagged) (struct{}, error) {
			seen <- in
			return struct{}{}, nil
		}); err != nil {
		t.Fatal(err)
	}
	k, err := kernel.New(kernel.WithRegistry(reg))
	if err != nil {
		t.Fatal(err)
	}
	e := echo.New()
	a, err := httpadapter.Mount(e, k)
	if err != nil {
		t.Fatal(err)
	}
	ts := serveEcho(t, e)
	if r := ts.do(t, "POST", "/refs/r-1?ref=r-2&note=hi", "", nil); r.status != 204 {
		t.Fatalf("POST /refs/r-1?ref=r-2 = %d %s, want 204", r.status, r.body)
	}
	if in := <-seen; in.Ref != "r-1" || in.Note != "hi" {
		t.Errorf("POST /refs/r-1?ref=r-2&note=hi: input %+v, want ref r-1 (path) and note hi (query)", in)
	}
	doc, err := a.OpenAPI(httpadapter.OpenAPIInfo{Title: "test", Version: "1"})
	if err != nil {
		t.Fatal(err)
	}
	op := doc.Paths.Find("/refs/{ref}").Post
	if op.Parameters.GetByInAndName("query", "ref") != nil || op.Parameters.GetByInAndName("query", "note") == nil {
		t.Errorf("POST /refs/{ref}: query parameters %v, want note and not ref", paramNames(op.Parameters))
	}
}

// TestOpenAPIPathParameterOnce: a field a path parameter fills is in the
// document once, as the path parameter, and never as a query parameter.
func TestOpenAPIPathParameterOnce(t *testing.T) {
	_, doc := serveOpenAPI(t, newTestApp(), serverOpts{}, httpadapter.OpenAPIInfo{Title: "test", Version: "1"})
	item := doc.Paths.Find("/items/{id}")
	for method, op := range map[string]*openapi3.Operation{"GET": item.Get, "DELETE": item.Delete} {
		n := 0
		for _, p := range op.Parameters {
			if p.Value.Name == "id" {
				n++
				if p.Value.In != "path" {
					t.Errorf("%s /items/{id}: id is declared in %s", method, p.Value.In)
				}
			}
		}
		if n != 1 {
			t.Errorf("%s /items/{id}: id declared %d times (%v), want once", method, n, paramNames(op.Parameters))
		}
	}
}

// paramNames lists parameters as in:name.
func paramNames(ps openapi3.Parameters) []string {
	var names []string
	for _, p := range ps {
		names = append(names, p.Value.In+":"+p.Value.Name)
	}
	return names
}
