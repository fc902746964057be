package httpadapter

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
)

type benchIn struct {
	Name   string `json:"name"`
	Amount int    `json:"amount"`
}

type benchOut struct {
	ID     string `json:"id"`
	Amount int    `json:"amount"`
}

// BenchmarkServe measures one request through the adapter and the kernel
// (in process, no network): the cost of guarding the response of an
// invocation that has a deadline ("guarded", what the adapter does: a
// context.AfterFunc on the deadline, stopped when the invocation returns
// first) against running it with no watch on its deadline ("unguarded").
func BenchmarkServe(b *testing.B) {
	reg := operations.NewRegistry()
	if err := operations.Register(reg, operations.Descriptor{ID: "orders.create", Method: "POST", Path: "/orders"},
		func(_ context.Context, in benchIn) (benchOut, error) {
			return benchOut{ID: "ord-1", Amount: in.Amount}, nil
		}); err != nil {
		b.Fatal(err)
	}
	k, err := kernel.New(kernel.WithRegistry(reg)) // MaxTimeoutSeconds gives every call a deadline
	if err != nil {
		b.Fatal(err)
	}
	for _, mode := range []struct {
		name  string
		guard bool
	}{{"unguarded", false}, {"guarded", true}} {
		b.Run(mode.name, func(b *testing.B) {
			e := echo.New()
			a, err := Mount(e, k)
			if err != nil {
				b.Fatal(err)
			}
			a.guard = mode.guard
			const body = `{"name":"widget","amount":3}`
			b.ReportAllocs()
			for b.Loop() {
				req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(body))
				w := httptest.NewRecorder()
				e.ServeHTTP(w, req)
				if w.Code != http.StatusCreated {
					b.Fatalf("status %d: %s", w.Code, w.Body)
				}
			}
		})
	}
}
