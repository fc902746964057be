package systemtest

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/sundial-go/sundial/samples/shop/internal/shopcmd"
)

// writeConfig writes a shop config file into t's temporary directory.
func writeConfig(t *testing.T, doc string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "shop.json")
	if err := os.WriteFile(p, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// fieldParam returns the integer parameter name of a RateLimit field value
// such as `"default";r=1;t=59`.
func fieldParam(t *testing.T, v, name string) int {
	t.Helper()
	if !strings.HasPrefix(v, `"default";`) {
		t.Fatalf("field %q does not name the policy \"default\"", v)
	}
	for _, p := range strings.Split(v, ";")[1:] {
		if k, n, ok := strings.Cut(p, "="); ok && k == name {
			i, err := strconv.Atoi(n)
			if err != nil {
				t.Fatalf("field %q: %s is not an integer", v, name)
			}
			return i
		}
	}
	t.Fatalf("field %q has no %s", v, name)
	return 0
}

// TestRateLimitHeadersHTTP: with RateLimitHeaders on, every response of a
// rate-limited operation carries RateLimit-Policy and RateLimit
// (draft-ietf-httpapi-ratelimit-headers-10); the 503 past the limit has a
// Retry-After no earlier than the reset it announces. Without the key,
// no fields.
func TestRateLimitHeadersHTTP(t *testing.T) {
	cfg := writeConfig(t, `{"Sundial":{"Kernel":{"Resilience":{"Operations":{
		"orders.create":{"PermitLimit":2,"WindowSeconds":60,"RateLimitHeaders":true},
		"reports.export":{"PermitLimit":2,"WindowSeconds":60}}}}}}`)
	s := startShopHTTP(t, shopcmd.ServeOptions{ConfigFile: cfg})
	for i, wantR := range []int{1, 0} {
		r := s.call(t, "POST", "/orders", `{"name":"widget","amount":1}`, nil)
		if r.status != 201 {
			t.Fatalf("call %d: status %d %s", i, r.status, r.body)
		}
		if got := r.header.Get("RateLimit-Policy"); got != `"default";q=2;w=60` {
			t.Fatalf("RateLimit-Policy = %q", got)
		}
		rl := r.header.Get("RateLimit")
		if fieldParam(t, rl, "r") != wantR || fieldParam(t, rl, "t") < 1 || fieldParam(t, rl, "t") > 60 {
			t.Fatalf("call %d: RateLimit = %q, want r=%d and 1 <= t <= 60", i, rl, wantR)
		}
	}
	r := s.call(t, "POST", "/orders", `{"name":"widget","amount":1}`, nil)
	if r.status != 503 {
		t.Fatalf("third call: status %d", r.status)
	}
	rl := r.header.Get("RateLimit")
	reset := fieldParam(t, rl, "t")
	retry, err := strconv.Atoi(r.header.Get("Retry-After"))
	if fieldParam(t, rl, "r") != 0 || err != nil || retry < reset {
		t.Fatalf("503: RateLimit %q, Retry-After %q: want r=0 and Retry-After >= t", rl, r.header.Get("Retry-After"))
	}
	// An operation without RateLimitHeaders sends none.
	r = s.call(t, "POST", "/reports/export", `{"delayMs":0}`, nil)
	if r.header.Get("RateLimit") != "" || r.header.Get("RateLimit-Policy") != "" {
		t.Fatalf("reports.export without RateLimitHeaders sent %q / %q", r.header.Get("RateLimit-Policy"), r.header.Get("RateLimit"))
	}
}

// TestRateLimitHeadersGRPC: the same facts as gRPC response header
// metadata, on success and on the rejection.
func TestRateLimitHeadersGRPC(t *testing.T) {
	cfg := writeConfig(t, `{"Sundial":{"Kernel":{"Resilience":{"Operations":{
		"orders.create":{"PermitLimit":1,"WindowSeconds":30,"RateLimitHeaders":true}}}}}}`)
	g := startShopGRPC(t, shopcmd.ServeOptions{ConfigFile: cfg})
	for i, wantR := range []int{0, 0} {
		var hdr metadata.MD
		_, st := g.call(t.Context(), t, "shop.v1.Orders", "Create", `{"name":"widget","amount":1}`, grpc.Header(&hdr))
		if (i == 0) != (st == nil) {
			t.Fatalf("call %d: status %v", i, st)
		}
		if got := hdr.Get("ratelimit-policy"); len(got) != 1 || got[0] != `"default";q=1;w=30` {
			t.Fatalf("call %d: ratelimit-policy = %q", i, got)
		}
		rl := hdr.Get("ratelimit")
		if len(rl) != 1 || fieldParam(t, rl[0], "r") != wantR || fieldParam(t, rl[0], "t") > 30 {
			t.Fatalf("call %d: ratelimit = %q", i, rl)
		}
	}
}
