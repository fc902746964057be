package httpadapter_test

import (
	"context"
	"net"
	"net/http"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/sundial-go/sundial/adapters/httpadapter"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/kernel/client"
	"github.com/sundial-go/sundial/operations"
)

// lookup is the input of the client transport's test: a path parameter,
// query parameters of several kinds, and a field that stays zero.
type lookup struct {
	ID      string   `json:"id" param:"id"`
	Verbose bool     `json:"verbose" query:"verbose"`
	Tags    []string `json:"tags" query:"tag"`
	Limit   *int     `json:"limit" query:"limit"`
	Skip    int      `json:"skip" query:"skip"`
}

// TestClientTransportFillsPathAndQuery: a GET through the client transport
// puts the path parameter in the path, escaped, and the other fields in
// the query, so the server binds the same input the caller gave. A POST
// sends its input as the JSON body.
func TestClientTransportFillsPathAndQuery(t *testing.T) {
	reg := operations.NewRegistry()
	echoBack := func(_ context.Context, in lookup) (lookup, error) { return in, nil }
	if err := operations.Register(reg, operations.Descriptor{ID: "items.get", Method: "GET", Path: "/items/:id"}, echoBack); err != nil {
		t.Fatal(err)
	}
	if err := operations.Register(reg, operations.Descriptor{ID: "items.put", Method: "POST", Path: "/items/:id"}, echoBack); err != nil {
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
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: e}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close(); <-done })
	rt := &http.Transport{}
	t.Cleanup(rt.CloseIdleConnections)
	tr := httpadapter.ClientTransport(reg, "http://"+ln.Addr().String()+"/", rt)

	limit := 7
	in := lookup{ID: "a b/c", Verbose: true, Tags: []string{"x", "y"}, Limit: &limit}
	for _, id := range []string{"items.get", "items.put"} {
		c, err := client.New[lookup, lookup](tr, id)
		if err != nil {
			t.Fatal(err)
		}
		got, err := c.Call(t.Context(), in)
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		if got.ID != in.ID || !got.Verbose || len(got.Tags) != 2 || got.Tags[1] != "y" ||
			got.Limit == nil || *got.Limit != 7 || got.Skip != 0 {
			t.Errorf("%s: the server bound %+v, want %+v", id, got, in)
		}
	}
}
