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
	post := keyedServer(t, reg, "accounts.charge")
	if st, body := post("/accounts/A/charge"); st != http.StatusOK || !strings.Contains(body, `"account":"A"`) {
		t.Fatalf("A: %d %s", st, body)
	}
	if st, body := post("/accounts/A/charge"); st != http.StatusOK || !strings.Contains(body, `"account":"A"`) {
		t.Fatalf("A again: %d %s, want the replay", st, body)
	}
	if st, body := post("/accounts/B/charge"); st != http.StatusUnprocessableEntity {
		t.Fatalf("same key on /accounts/B: %d %s, want 422", st, body)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
}

type accountRefund struct {
	*AccountRef
	Amount int `json:"amount"`
}

// TestPathParameterThroughEmbeddedPointer: a path parameter whose field is
// promoted through a nil embedded pointer is bound (the pointer is
// allocated), and fingerprinted (was: reflect panicked in the binder,
// outside the kernel's recover, and the connection was dropped).
func TestPathParameterThroughEmbeddedPointer(t *testing.T) {
	reg := operations.NewRegistry()
	if err := operations.Register(reg, operations.Descriptor{ID: "accounts.refund", Method: "POST", Path: "/accounts/:account/refund"},
		func(ctx context.Context, in accountRefund) (accountReceipt, error) {
			if in.AccountRef == nil {
				return accountReceipt{}, nil
			}
			return accountReceipt{Account: in.Account, Amount: in.Amount}, nil
		}); err != nil {
		t.Fatal(err)
	}
	post := keyedServer(t, reg, "accounts.refund")
	if st, body := post("/accounts/A/refund"); st != http.StatusOK || !strings.Contains(body, `"account":"A"`) {
		t.Fatalf("A: %d %s, want A's receipt", st, body)
	}
	if st, body := post("/accounts/B/refund"); st != http.StatusUnprocessableEntity {
		t.Fatalf("same key on /accounts/B: %d %s, want 422", st, body)
	}
}

// keyedServer serves reg's operation id with idempotency keys on a
// loopback listener and returns a poster: POST path with {"amount":5}
// and the key "k1", answered status and body.
func keyedServer(t *testing.T, reg *operations.Registry, id string) func(path string) (int, string) {
	t.Helper()
	k, err := kernel.New(kernel.WithRegistry(reg),
		kernel.WithConfigJSON([]byte(`{"Sundial":{"Kernel":{"Resilience":{"Operations":{"`+id+`":{"Idempotency":{}}}}}}}`)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { k.Close() })
	e := echo.New()
	if _, err := httpadapter.Mount(e, k); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return func(path string) (int, string) {
		req, _ := http.NewRequestWithContext(t.Context(), "POST", srv.URL+path, strings.NewReader(`{"amount":5}`))
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
}
