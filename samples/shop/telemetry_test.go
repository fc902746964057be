package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// TestShopMetricsEndpoint: /metrics on the HTTP port lists the invocation
// counter per operation after a call, the breaker state of the operation
// that has a breaker, the count of stragglers, and Go's runtime metrics
// (goroutines, memory).
func TestShopMetricsEndpoint(t *testing.T) {
	s := startShopHTTP(t, serveOptions{})
	if r := s.call(t, "POST", "/orders", `{"name":"widget","amount":1}`, nil); r.status != http.StatusCreated {
		t.Fatalf("POST /orders = %d %s, want 201", r.status, r.body)
	}
	r := s.call(t, "GET", "/metrics", "", nil)
	if r.status != http.StatusOK {
		t.Fatalf("GET /metrics = %d, want 200", r.status)
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^sundial_invocation_count_total\{[^}]*kind="OK"[^}]*operation="orders.create"[^}]*protocol="http"[^}]*\} 1$`),
		regexp.MustCompile(`(?m)^sundial_invocation_duration_seconds_count\{[^}]*operation="orders.create"[^}]*\} 1$`),
		regexp.MustCompile(`(?m)^sundial_breaker_state\{[^}]*operation="billing.charge"[^}]*\} 0$`),
		regexp.MustCompile(`(?m)^sundial_queue_depth\{[^}]*operation="orders.create"[^}]*queue="rate"[^}]*\} 0$`),
		regexp.MustCompile(`(?m)^sundial_stragglers(_total)?\{[^}]*\} 0$|(?m)^sundial_stragglers(_total)? 0$`),
		regexp.MustCompile(`(?m)^go_goroutines [0-9]+$`),
		regexp.MustCompile(`(?m)^go_memstats_heap_inuse_bytes [0-9.e+]+$`),
	} {
		if !want.MatchString(r.body) {
			t.Errorf("GET /metrics has no line matching %s; got:\n%s", want, grepLines(r.body, "sundial_"))
		}
	}
	if strings.Contains(r.body, `route="GET /metrics"`) {
		t.Errorf("/metrics scrapes are themselves counted; want them outside the pipeline")
	}
}

func grepLines(s, sub string) string {
	var out []string
	for line := range strings.Lines(s) {
		if strings.Contains(line, sub) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "")
}

// TestShopTraceIDs: with the SDK installed every Problem Details traceId
// is a real W3C trace ID, equal to the access log's; an incoming
// traceparent is continued, not replaced.
func TestShopTraceIDs(t *testing.T) {
	s := startShopHTTP(t, serveOptions{})
	r := s.call(t, "GET", "/orders/nope", "", nil)
	id, _ := r.problem["traceId"].(string)
	if r.status != http.StatusNotFound || !traceIDPattern.MatchString(id) || id == strings.Repeat("0", 32) {
		t.Fatalf("GET /orders/nope = %d, traceId %q; want 404 with a W3C trace ID", r.status, id)
	}
	if rec := s.logs.waitRecord(t, "orders.get", "SHOP_NOT_FOUND_001"); rec.Attrs["traceId"] != id {
		t.Errorf("access log traceId = %v, want the Problem Details one %s", rec.Attrs["traceId"], id)
	}

	const caller = "4bf92f3577b34da6a3ce929d0e0e4736"
	r = s.call(t, "GET", "/orders/gone", "", map[string]string{"traceparent": "00-" + caller + "-00f067aa0ba902b7-01"})
	if got := r.problem["traceId"]; got != caller {
		t.Errorf("with traceparent, traceId = %v, want the caller's %s", got, caller)
	}
}

// TestShopExportsOTLPWhenConfigured: with OTEL_EXPORTER_OTLP_ENDPOINT set,
// the invocation spans are exported (OTLP/HTTP) to it by shutdown at the
// latest; without it nothing is sent (TestShopMetricsEndpoint and the other
// tests run with no endpoint and no collector).
func TestShopExportsOTLPWhenConfigured(t *testing.T) {
	var mu sync.Mutex
	var bodies [][]byte
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		if r.URL.Path == "/v1/traces" {
			bodies = append(bodies, b)
		}
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer collector.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL) // 127.0.0.1
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "")

	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	done := make(chan error, 1)
	logs := newShopLogs()
	o := serveOptions{httpAddr: "127.0.0.1:0", grpcAddr: "127.0.0.1:0", ready: func(a string) { addr <- a },
		logger: logs.Logger()}
	go func() { done <- serve(ctx, o) }()
	var url string
	select {
	case a := <-addr:
		url = "http://" + a
	case err := <-done:
		cancel()
		t.Fatalf("serve() = %v before listening", err)
	}
	client := &http.Client{Transport: &http.Transport{}}
	resp, err := client.Post(url+"/orders", "application/json", strings.NewReader(`{"name":"widget","amount":1}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	client.CloseIdleConnections()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("serve() after shutdown = %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	all := bytes.Join(bodies, nil)
	if !bytes.Contains(all, []byte("orders.create")) || !bytes.Contains(all, []byte("sundial.outcome.kind")) {
		t.Errorf("collector received %d trace exports without the orders.create span; log:\n%s", len(bodies), logs)
	}
}
