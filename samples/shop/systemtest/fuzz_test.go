package systemtest

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/sundial-go/sundial/adapters/httpadapter"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/samples/shop/app"
	"github.com/sundial-go/sundial/samples/shop/internal/shopcmd"
)

// FuzzShopOrderInput sends any body to orders.create, the shop's
// constrained order input, through the HTTP adapter: never a crash, never
// a 500; a 400 KERNEL_VALIDATION_007 lists fields (JSON pointers, rules,
// messages) and the body, decoded, does break the constraints; a 201 is an
// input that keeps them.
func FuzzShopOrderInput(f *testing.F) {
	for _, seed := range []string{
		`{"name":"widget","amount":1}`,
		`{"name":"","amount":0,"currency":"GBP"}`,
		`{"name":"` + strings.Repeat("é", 101) + `","amount":10001}`,
		`{"name":"lamp","amount":10000,"currency":"USD"}`,
		`{"name":"lamp","amount":5,"currency":""}`,
		`{"name":null,"amount":1e3}`,
		`[]`,
	} {
		f.Add([]byte(seed))
	}
	k, err := shopcmd.NewKernel("", kernel.WithConfigJSON([]byte(benchShopConfig)))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = k.Wait(context.Background()) })
	e := echo.New()
	if _, err := httpadapter.Mount(e, k); err != nil {
		f.Fatal(err)
	}
	d := descriptorOf(k, "orders.create")
	f.Fuzz(func(t *testing.T, body []byte) {
		req := httptest.NewRequest(http.MethodPost, "/orders", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("%q = %d %s", body, rec.Code, rec.Body)
		}
		var in app.CreateOrder
		decoded := json.Unmarshal(body, &in) == nil
		var p httpadapter.Problem
		_ = json.Unmarshal(rec.Body.Bytes(), &p)
		switch {
		case rec.Code == http.StatusCreated:
			if err := d.CheckConstraints(&in); !decoded || err != nil {
				t.Fatalf("%q was created, but it breaks the constraints: %v", body, err)
			}
		case p.Code == operations.CodeConstraint:
			if len(p.Violations()) == 0 {
				t.Fatalf("%q: %s without failing fields", body, p.Code)
			}
			for _, fe := range p.Violations() {
				if !strings.HasPrefix(fe.Field, "/") || fe.Rule == "" || fe.Message == "" {
					t.Fatalf("%q: field error %+v", body, fe)
				}
			}
			if decoded && d.CheckConstraints(&in) == nil {
				t.Fatalf("%q: refused with %s, but it keeps the constraints", body, p.Code)
			}
		}
	})
}
