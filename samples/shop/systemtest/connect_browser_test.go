package systemtest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sundial-go/sundial/samples/shop/internal/shopcmd"
)

// connectPage is a page that calls the shop over the Connect protocol's
// unary JSON form, as connect-web's transport does: a POST of the JSON
// message with Connect-Protocol-Version and Connect-Timeout-Ms. callShop
// resolves to the status, the JSON body and the trace ID header.
const connectPage = `<!doctype html><html><head><title>connect</title><script>
async function callShop(base, procedure, message, timeoutMs) {
	const headers = {"Content-Type": "application/json", "Connect-Protocol-Version": "1"};
	if (timeoutMs) headers["Connect-Timeout-Ms"] = String(timeoutMs);
	const res = await fetch(base + procedure, {method: "POST", headers, body: JSON.stringify(message)});
	return {status: res.status, body: await res.json(), traceId: res.headers.get("Sundial-Trace-Id")};
}
</script></head><body>connect</body></html>`

// TestConnectFromChromium opens a page of another origin in a real
// headless Chromium. With the page's origin allowed (ConnectOrigins), the
// page creates an order over Connect on the shop's HTTP port, then calls
// reports.export with a 300 ms deadline: 504 deadline_exceeded with
// KERNEL_TIMEOUT_001 in its ErrorInfo. A page of an origin not allowed
// cannot read the answer.
func TestConnectFromChromium(t *testing.T) {
	t.Parallel()
	bin := chromium(t)
	page, pageOrigin := servePage(t)
	s := startShopHTTP(t, shopcmd.ServeOptions{ConnectOrigins: []string{pageOrigin}})

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b := startBrowser(ctx, t, bin)
	if err := b.navigate(page); err != nil {
		t.Fatalf("open the page: %v", err)
	}
	type result struct {
		Status int
		Body   struct {
			ID, Name, Code, Message string
			Details                 []struct {
				Type  string
				Debug struct{ Reason string }
			}
		}
		Error string
	}
	call := func(procedure, message string, timeoutMs int) result {
		t.Helper()
		expr := fmt.Sprintf(`callShop(%q, %q, %s, %d).catch((e) => ({error: String(e)}))`, s.url, procedure, message, timeoutMs)
		var r result
		if err := b.evaluate(expr, &r); err != nil {
			t.Fatalf("evaluate %s: %v", procedure, err)
		}
		return r
	}
	r := call("/shop.v1.Orders/Create", `{"name":"lamp","amount":3}`, 5000)
	if r.Status != http.StatusOK || !strings.HasPrefix(r.Body.ID, "ord-") || r.Body.Name != "lamp" {
		t.Fatalf("create from the page: %+v", r)
	}
	start := time.Now()
	r = call("/shop.v1.Reports/Export", `{"delayMs":5000}`, 300)
	took := time.Since(start)
	if r.Status != http.StatusGatewayTimeout || r.Body.Code != "deadline_exceeded" ||
		len(r.Body.Details) == 0 || r.Body.Details[0].Debug.Reason != "KERNEL_TIMEOUT_001" {
		t.Fatalf("export with a 300 ms deadline: %+v", r)
	}
	if took > 4*time.Second {
		t.Errorf("the deadline's answer took %v", took)
	}

	// The same page, served from an origin the shop does not allow.
	other, _ := servePage(t)
	if err := b.navigate(other); err != nil {
		t.Fatal(err)
	}
	if r = call("/shop.v1.Orders/Create", `{"name":"lamp","amount":3}`, 5000); r.Error == "" {
		t.Fatalf("a foreign origin read the answer: %+v", r)
	}
}

// servePage serves connectPage on a 127.0.0.1 port of its own (an origin
// other than the shop's) and returns its URL and origin.
func servePage(t *testing.T) (url, origin string) {
	t.Helper()
	origin = serveOrigin(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte(connectPage))
	}))
	return origin + "/", origin
}

// serveOrigin serves h on a 127.0.0.1 port of its own until the test ends,
// and returns its origin.
func serveOrigin(t *testing.T, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: h}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() {
		_ = srv.Close()
		<-done
	})
	return "http://" + ln.Addr().String()
}
