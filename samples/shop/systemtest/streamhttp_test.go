package systemtest

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sundial-go/sundial/samples/shop/internal/shopcmd"
)

// TestShopOrdersOverHTTP: the shop's orders.import takes an NDJSON body
// and answers once; orders.watch then streams the orders as SSE, from the
// one after the Last-Event-ID.
func TestShopOrdersOverHTTP(t *testing.T) {
	t.Parallel()
	s := startShopHTTP(t, shopcmd.ServeOptions{})
	resp, err := s.client.Post(s.url+"/orders/import", "application/x-ndjson",
		strings.NewReader("{\"name\":\"a\",\"amount\":1}\n{\"name\":\"b\",\"amount\":2}\n"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /orders/import: %d %s", resp.StatusCode, body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.url+"/orders/watch", nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Last-Event-ID", "1")
	resp, err = s.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || ct != "text/event-stream" {
		t.Fatalf("GET /orders/watch: %d %s", resp.StatusCode, ct)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var ev struct {
			Seq   int `json:"seq"`
			Order struct {
				Name string `json:"name"`
			} `json:"order"`
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil || ev.Seq != 2 || ev.Order.Name != "b" {
			t.Fatalf("first event %s, want order b with seq 2 (after the Last-Event-ID 1)", data)
		}
		return
	}
	t.Fatalf("no event: %v", sc.Err())
}
