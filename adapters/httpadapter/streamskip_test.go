package httpadapter_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/sundial-go/sundial/adapters/httpadapter"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
)

// TestStreamIsNoUnaryRoute: Mount's unary routes skip a streaming
// operation, even one with a method and a path: its route streams.
func TestStreamIsNoUnaryRoute(t *testing.T) {
	type in struct{ ID string }
	reg := operations.NewRegistry()
	err := errors.Join(
		operations.Register(reg, operations.Descriptor{ID: "orders.get", Method: "GET", Path: "/orders/:id"},
			func(context.Context, in) (in, error) { return in{}, nil }),
		operations.RegisterServerStream(reg, operations.Descriptor{ID: "orders.watch", Method: "GET", Path: "/orders/watch"},
			func(context.Context, in, *operations.Sender[in]) error { return nil }),
	)
	if err != nil {
		t.Fatal(err)
	}
	k, err := kernel.New(kernel.WithRegistry(reg))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	e := echo.New()
	if _, err := httpadapter.Mount(e, k); err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodGet, "/orders/watch", nil)
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, req)
	if ct := rec.Header().Get("Content-Type"); rec.Code != http.StatusOK || ct != "application/x-ndjson" {
		t.Fatalf("GET /orders/watch: %d %s %s, want the stream's 200 application/x-ndjson",
			rec.Code, ct, rec.Body)
	}
}
