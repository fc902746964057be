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

// BenchmarkServe measures one request through echo, the adapter and the
// kernel (in process, no network): with a deadline on every call (the
// kernel's default MaxTimeoutSeconds; the kernel guards the answer) and,
// for comparison, with the built-in middleware off.
func BenchmarkServe(b *testing.B) {
	reg := operations.NewRegistry()
	if err := operations.Register(reg, operations.Descriptor{ID: "orders.create", Method: "POST", Path: "/orders"},
		func(_ context.Context, in benchIn) (benchOut, error) {
			return benchOut{ID: "ord-1", Amount: in.Amount}, nil
		}); err != nil {
		b.Fatal(err)
	}
	for _, mode := range []struct {
		name   string
		config string
	}{
		{"deadline", ""},
		{"builtin-off", `{"Sundial":{"Kernel":{"UseBuiltInMiddleware":false}}}`},
	} {
		b.Run(mode.name, func(b *testing.B) {
			opts := []kernel.Option{kernel.WithRegistry(reg)}
			if mode.config != "" {
				opts = append(opts, kernel.WithConfigJSON([]byte(mode.config)))
			}
			k, err := kernel.New(opts...)
			if err != nil {
				b.Fatal(err)
			}
			e := echo.New()
			if _, err := Mount(e, k); err != nil {
				b.Fatal(err)
			}
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
