package systemtest

import (
	"io"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/sundial-go/sundial/samples/shop/internal/shopcmd"
)

// TestShopQueryCannotChangeTheOrder: GET /orders/{id} serves the order
// the path names, whatever ?id= says, and /openapi.json declares id once,
// in the path (docs/http.md, "From request to input").
func TestShopQueryCannotChangeTheOrder(t *testing.T) {
	s := startShopHTTP(t, shopcmd.ServeOptions{})
	if r := s.call(t, "POST", "/orders", `{"name":"widget","amount":1}`, nil); r.status != 201 {
		t.Fatalf("POST /orders = %d %s, want 201", r.status, r.body)
	}
	wantProblem(t, s.call(t, "GET", "/orders/ord-999?id=ord-1", "", nil), 404, "NOT_FOUND", "SHOP_NOT_FOUND_001",
		"/orders/ord-999", "", nil)
	if r := s.call(t, "GET", "/orders/ord-1?id=ord-999", "", nil); r.status != 200 ||
		r.body != `{"id":"ord-1","name":"widget","amount":1}` {
		t.Errorf("GET /orders/ord-1?id=ord-999 = %d %s, want 200 and order ord-1", r.status, r.body)
	}

	resp, err := s.client.Get(s.url + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	doc, err := openapi3.NewLoader().LoadFromData(body)
	if err != nil {
		t.Fatalf("loading /openapi.json: %v", err)
	}
	var ids []string
	for _, p := range doc.Paths.Find("/orders/{id}").Get.Parameters {
		if p.Value.Name == "id" {
			ids = append(ids, p.Value.In)
		}
	}
	if len(ids) != 1 || ids[0] != "path" {
		t.Errorf("GET /orders/{id} declares id in %v, want once, in path", ids)
	}
}
