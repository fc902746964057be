package httpadapter_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sundial-go/sundial/adapters/httpadapter"
	"github.com/sundial-go/sundial/kernel/propagation"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience"
	"github.com/sundial-go/sundial/resilience/outbound"
)

func dependency(t *testing.T, edit func(*outbound.Policy)) *outbound.Dependency {
	t.Helper()
	p := outbound.DefaultPolicy()
	p.BackoffBase, p.BackoffMax = time.Millisecond, 2*time.Millisecond
	if edit != nil {
		edit(&p)
	}
	d, err := outbound.New("billing", p)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func dependencyClient(t *testing.T, d *outbound.Dependency, base http.RoundTripper) *http.Client {
	if base == nil {
		base = &http.Transport{}
	}
	c := &http.Client{Transport: httpadapter.NewTransport(base, httpadapter.WithDependency(d))}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

// TestTransportRetriesADownstream503: a real Sundial service answers 503
// TEST_UNAVAILABLE_001 twice, then 200: the client sees the 200 and the
// handler ran three times.
func TestTransportRetriesADownstream503(t *testing.T) {
	app := newTestApp()
	s := startServer(t, app, serverOpts{})
	c := dependencyClient(t, dependency(t, nil), nil)
	req, _ := http.NewRequestWithContext(t.Context(), "POST", s.url+"/flaky", strings.NewReader(`{}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || app.calls.Load() != 3 {
		t.Fatalf("status %d after %d handler calls, want 200 after 3", resp.StatusCode, app.calls.Load())
	}
}

// TestTransportRetryAfterPastDeadline: the downstream's 503 with a
// Retry-After of 60 s, under a 2 s deadline, ends the call at once with
// that answer, as a *pipeline.Error the caller finds with errors.As.
func TestTransportRetryAfterPastDeadline(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("Content-Type", httpadapter.ContentTypeProblem)
		w.Header().Set("Retry-After", "60")
		w.WriteHeader(503)
		_, _ = w.Write([]byte(`{"type":"urn:sundial:error:KERNEL_UNAVAILABLE_002","title":"UNAVAILABLE","status":503,"detail":"Rate limit exceeded.","code":"KERNEL_UNAVAILABLE_002","details":{"retryAfter":60}}`))
	}))
	defer srv.Close()
	c := dependencyClient(t, dependency(t, nil), nil)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
	_, err := c.Do(req)
	e, ok := errors.AsType[*pipeline.Error](err)
	if ra, _ := e.RetryAfter(); !ok || e.Code() != resilience.CodeRateLimited || ra != time.Minute || hits.Load() != 1 {
		t.Fatalf("err %v (retry-after %v) after %d hits, want the 503 after 1", err, ra, hits.Load())
	}
}

// TestTransportRetriesRefusedConnection: nothing listens on the port;
// every attempt's dial is refused before a byte is sent, so it is retried
// up to Attempts.
func TestTransportRetriesRefusedConnection(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	var dials atomic.Int32
	base := &http.Transport{DialContext: func(ctx context.Context, network, a string) (net.Conn, error) {
		dials.Add(1)
		return (&net.Dialer{}).DialContext(ctx, network, a)
	}}
	c := dependencyClient(t, dependency(t, func(p *outbound.Policy) { p.FailureThreshold = 0 }), base)
	req, _ := http.NewRequestWithContext(t.Context(), "POST", "http://"+addr+"/x", strings.NewReader(`{"a":1}`))
	if _, err := c.Do(req); err == nil || dials.Load() != 3 {
		t.Fatalf("err %v after %d dials, want a refusal after 3", err, dials.Load())
	}
}

// TestTransportAttemptsShareKeyAndTrace: three attempts carry the same
// idempotency key and trace; each is the child of its own attempt span,
// itself a child of the caller's span.
func TestTransportAttemptsShareKeyAndTrace(t *testing.T) {
	var mu sync.Mutex
	var seen []http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Clone())
		n := len(seen)
		mu.Unlock()
		if n < 3 {
			w.WriteHeader(503)
		}
	}))
	defer srv.Close()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	ctx, parent := tp.Tracer("test").Start(t.Context(), "checkout")
	ctx, _ = propagation.WithIdempotencyKey(ctx, "charge-7")
	c := dependencyClient(t, dependency(t, nil), nil)
	req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL, strings.NewReader(`{}`))
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	parent.End()
	spans := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		spans[s.SpanContext().SpanID().String()] = s
	}
	if len(seen) != 3 {
		t.Fatalf("%d attempts, want 3", len(seen))
	}
	ids := map[string]bool{}
	for i, h := range seen {
		tp := strings.Split(h.Get("Traceparent"), "-")
		if len(tp) != 4 || tp[1] != parent.SpanContext().TraceID().String() {
			t.Fatalf("attempt %d traceparent %q is not the caller's trace", i+1, h.Get("Traceparent"))
		}
		s, ok := spans[tp[2]]
		if !ok || s.Name() != "outbound billing" || s.Parent().SpanID() != parent.SpanContext().SpanID() || ids[tp[2]] {
			t.Fatalf("attempt %d: its span %s is not a fresh child attempt span of the caller's", i+1, tp[2])
		}
		ids[tp[2]] = true
		if !strings.Contains(h.Get("Baggage"), "charge-7") {
			t.Fatalf("attempt %d baggage %q lacks the key", i+1, h.Get("Baggage"))
		}
	}
}
