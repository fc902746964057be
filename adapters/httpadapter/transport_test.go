package httpadapter_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/trace"

	"github.com/sundial-go/sundial/adapters/httpadapter"
)

// fakeRoundTripper answers in memory after a simulated latency, 503 for
// the first fail requests, and records the headers it received.
type fakeRoundTripper struct {
	latency time.Duration
	fail    int

	mu      sync.Mutex // guards headers
	headers []http.Header
}

func (f *fakeRoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	f.mu.Lock()
	f.headers = append(f.headers, req.Header.Clone())
	n := len(f.headers)
	f.mu.Unlock()
	time.Sleep(f.latency)
	status := http.StatusOK
	if n <= f.fail {
		status = http.StatusServiceUnavailable
	}
	return &http.Response{StatusCode: status, Body: http.NoBody, Header: http.Header{}, Request: req}, nil
}

func (f *fakeRoundTripper) seen(name string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, h := range f.headers {
		out = append(out, h.Get(name))
	}
	return out
}

// getWithRetry is the retry pattern of docs/http.md: every attempt, every
// back-off and the caller's own work spend the one deadline on ctx, and
// the Transport tells the server what is left on each attempt.
func getWithRetry(ctx context.Context, c *http.Client, url string, attempts int, backoff time.Duration) (int, error) {
	for attempt := 1; ; attempt++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return 0, err
		}
		resp, err := c.Do(req)
		if err != nil {
			return 0, err // includes the deadline passing
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || attempt == attempts {
			return resp.StatusCode, nil
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return 0, ctx.Err()
		}
	}
}

// The reference behaviour: one 2 s budget, a 503 and a retry after a
// 300 ms back-off, 500 ms of local work, then a second call. Every request
// carries what is left at the moment it is sent.
func TestTransportRetriesSpendOneBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := &fakeRoundTripper{latency: 8 * time.Millisecond, fail: 1}
		client := &http.Client{Transport: httpadapter.NewTransport(fake)}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		deadline, _ := ctx.Deadline()

		if status, err := getWithRetry(ctx, client, "http://inventory.internal/stock", 3, 300*time.Millisecond); status != 200 || err != nil {
			t.Fatalf("first read = %d, %v, want 200", status, err)
		}
		time.Sleep(500 * time.Millisecond) // local work
		if status, err := getWithRetry(ctx, client, "http://inventory.internal/stock", 3, 300*time.Millisecond); status != 200 || err != nil {
			t.Fatalf("second read = %d, %v, want 200", status, err)
		}

		// t=0: 2000 ms; t=8+300: 1692 ms; t=316+500: 1184 ms.
		want := []string{"2000", "1692", "1184"}
		if got := fake.seen(httpadapter.DefaultRelativeDeadlineHeader); strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("%s across attempts = %v, want %v", httpadapter.DefaultRelativeDeadlineHeader, got, want)
		}
		abs := httpadapter.FormatDeadline(deadline)
		for i, got := range fake.seen(httpadapter.HeaderDeadline) {
			if got != abs {
				t.Errorf("attempt %d: %s = %q, want the one deadline %q", i+1, httpadapter.HeaderDeadline, got, abs)
			}
		}

		// Once the budget is spent nothing more is sent.
		time.Sleep(2 * time.Second)
		_, err := getWithRetry(ctx, client, "http://inventory.internal/stock", 3, 300*time.Millisecond)
		if !errors.Is(err, context.DeadlineExceeded) || len(fake.seen("")) != 3 {
			t.Errorf("after the deadline: err %v, %d requests sent; want DeadlineExceeded and still 3", err, len(fake.seen("")))
		}
	})
}

func TestTransportHeaders(t *testing.T) {
	tests := []struct {
		name    string
		opts    []httpadapter.TransportOption
		url     string
		timeout time.Duration // 0: no deadline
		wantAbs bool
		wantRel string // header name expected, "" none
	}{
		{"no deadline, no headers", nil, "http://svc.internal/x", 0, false, ""},
		{"both headers by default", nil, "http://svc.internal/x", time.Second, true, httpadapter.DefaultRelativeDeadlineHeader},
		{"allowed host", []httpadapter.TransportOption{httpadapter.WithHosts("svc.internal")}, "http://svc.internal:8080/x", time.Second, true, httpadapter.DefaultRelativeDeadlineHeader},
		{"allowed host and port", []httpadapter.TransportOption{httpadapter.WithHosts("SVC.internal:8080")}, "http://svc.internal:8080/x", time.Second, true, httpadapter.DefaultRelativeDeadlineHeader},
		{"third party gets nothing", []httpadapter.TransportOption{httpadapter.WithHosts("svc.internal")}, "https://api.example.com/x", time.Second, false, ""},
		{"relative header renamed", []httpadapter.TransportOption{httpadapter.WithRelativeHeader("x-deadline-ms")}, "http://svc.internal/x", time.Second, true, "X-Deadline-Ms"},
		{"relative only", []httpadapter.TransportOption{httpadapter.WithAbsoluteHeader(false)}, "http://svc.internal/x", time.Second, false, httpadapter.DefaultRelativeDeadlineHeader},
		{"absolute only", []httpadapter.TransportOption{httpadapter.WithRelativeHeader("")}, "http://svc.internal/x", time.Second, true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fake := &fakeRoundTripper{}
				rt := httpadapter.NewTransport(fake, tt.opts...)
				ctx := context.Background()
				if tt.timeout > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, tt.timeout)
					defer cancel()
				}
				req, _ := http.NewRequestWithContext(ctx, "GET", tt.url, nil)
				resp, err := rt.RoundTrip(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if len(req.Header) != 0 {
					t.Errorf("RoundTrip modified the caller's request: %v", req.Header)
				}
				fake.mu.Lock()
				h := fake.headers[0]
				fake.mu.Unlock()
				if got := h.Get(httpadapter.HeaderDeadline) != ""; got != tt.wantAbs {
					t.Errorf("%s sent = %v, want %v (%v)", httpadapter.HeaderDeadline, got, tt.wantAbs, h)
				}
				for _, name := range []string{httpadapter.DefaultRelativeDeadlineHeader, "X-Deadline-Ms"} {
					want := ""
					if name == tt.wantRel {
						want = strconv.Itoa(int(tt.timeout.Milliseconds()))
					}
					if got := h.Get(name); got != want {
						t.Errorf("%s = %q, want %q", name, got, want)
					}
				}
			})
		})
	}
}

func TestTransportTraceContext(t *testing.T) {
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:  trace.SpanID{0, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7}, TraceFlags: trace.FlagsSampled,
	})
	ctx := trace.ContextWithSpanContext(context.Background(), sc)
	tests := []struct {
		url  string
		want string
	}{
		{"http://svc.internal/x", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
		{"https://api.example.com/x", ""},
	}
	for _, tt := range tests {
		fake := &fakeRoundTripper{}
		req, _ := http.NewRequestWithContext(ctx, "GET", tt.url, nil)
		resp, err := httpadapter.NewTransport(fake, httpadapter.WithHosts("svc.internal")).RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := fake.seen("Traceparent")[0]; got != tt.want {
			t.Errorf("%s: traceparent = %q, want %q", tt.url, got, tt.want)
		}
	}
}

func TestTransportPastDeadlineSendsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := &fakeRoundTripper{}
		ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Millisecond))
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "POST", "http://svc.internal/x", strings.NewReader("{}"))
		_, err := httpadapter.NewTransport(fake).RoundTrip(req)
		if !errors.Is(err, context.DeadlineExceeded) || len(fake.seen("")) != 0 {
			t.Fatalf("RoundTrip past the deadline = %v with %d requests sent, want DeadlineExceeded and none", err, len(fake.seen("")))
		}
	})
}

// End to end: a Sundial server behind a real listener reads what the
// Transport wrote on each attempt; the values fall as the budget is spent.
func TestTransportRetriesEndToEnd(t *testing.T) {
	var mu sync.Mutex
	var got []int
	s := startServer(t, newTestApp(), serverOpts{routes: func(e *echo.Echo, _ *httpadapter.Adapter) {
		// The application's own echo middleware still runs.
		e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
			return func(c echo.Context) error {
				if v := c.Request().Header.Get(httpadapter.DefaultRelativeDeadlineHeader); v != "" {
					ms, _ := strconv.Atoi(v)
					mu.Lock()
					got = append(got, ms)
					mu.Unlock()
				}
				return next(c)
			}
		})
	}})
	client := &http.Client{Transport: httpadapter.NewTransport(&http.Transport{})}
	defer client.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	backoff := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		req, _ := http.NewRequestWithContext(ctx, "POST", s.url+"/flaky", nil)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == 200 {
			break
		}
		if resp.StatusCode != 503 || attempt == 3 {
			t.Fatalf("attempt %d: status %d", attempt, resp.StatusCode)
		}
		time.Sleep(backoff)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 3 {
		t.Fatalf("server saw %d attempts with the header (%v), want 3", len(got), got)
	}
	for i, ms := range got {
		if ms > 2000 || ms < 1000 {
			t.Errorf("attempt %d: %d ms left, want within the 2 s budget", i+1, ms)
		}
		if i > 0 && got[i-1]-ms < int(backoff.Milliseconds()) {
			t.Errorf("attempt %d: %d ms left after %d, want at least the %v back-off less", i+1, ms, got[i-1], backoff)
		}
	}
	t.Logf("%s on successive attempts: %v", httpadapter.DefaultRelativeDeadlineHeader, got)
}
