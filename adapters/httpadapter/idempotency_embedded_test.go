package httpadapter_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/sundial-go/sundial/adapters/httpadapter"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
)

// AccountRef is the path part of an input, shared by embedding.
type AccountRef struct {
	Account string `param:"account" json:"-"`
}

type accountCharge struct {
	AccountRef
	Amount int `json:"amount"`
}

type accountReceipt struct {
	Account string `json:"account"`
	Amount  int    `json:"amount"`
}

// TestIdempotencyFingerprintCoversEmbeddedPathFields: the account comes
// from the path through an embedded struct (the binder sets promoted
// fields); the same key and body on /accounts/A and /accounts/B is a 422,
// not A's receipt replayed for B (was: 200, Idempotent-Replayed, B never
// charged).
func TestIdempotencyFingerprintCoversEmbeddedPathFields(t *testing.T) {
	var runs atomic.Int64
	reg := operations.NewRegistry()
	if err := operations.Register(reg, operations.Descriptor{ID: "accounts.charge", Method: "POST", Path: "/accounts/:account/charge"},
		func(ctx context.Context, in accountCharge) (accountReceipt, error) {
			runs.Add(1)
			return accountReceipt{Account: in.Account, Amount: in.Amount}, nil
		}); err != nil {
		t.Fatal(err)
	}
	k, err := kernel.New(kernel.WithRegistry(reg),
		kernel.WithConfigJSON([]byte(`{"Sundial":{"Kernel":{"Resilience":{"Operations":{"accounts.charge":{"Idempotency":{}}}}}}}`)))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	e := echo.New()
	if _, err := httpadapter.Mount(e, k); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e)
	defer srv.Close()
	post := func(account string) (int, string) {
		req, _ := http.NewRequestWithContext(t.Context(), "POST", srv.URL+"/accounts/"+account+"/charge", strings.NewReader(`{"amount":5}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", `"k1"`)
		res, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	if st, body := post("A"); st != http.StatusOK || !strings.Contains(body, `"account":"A"`) {
		t.Fatalf("A: %d %s", st, body)
	}
	if st, body := post("A"); st != http.StatusOK || !strings.Contains(body, `"account":"A"`) {
		t.Fatalf("A again: %d %s, want the replay", st, body)
	}
	if st, body := post("B"); st != http.StatusUnprocessableEntity {
		t.Fatalf("same key on /accounts/B: %d %s, want 422", st, body)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
}
