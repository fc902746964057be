package systemtest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sundial-go/sundial/adapters/httpadapter"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
	"github.com/sundial-go/sundial/resilience"
	"github.com/sundial-go/sundial/samples/internal/pipenet"
	"github.com/sundial-go/sundial/samples/shop/internal/shopcmd"
)

// syncBuffer is a goroutine-safe buffer, for serve's stdout.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// shopLogs is the shop's log: everything its logger wrote.
type shopLogs struct{ *pipelinetest.LogSink }

func newShopLogs() shopLogs { return shopLogs{new(pipelinetest.LogSink)} }

// waitRecord waits for an HTTP access record of operation op whose code
// is code.
func (l shopLogs) waitRecord(t *testing.T, op, code string) pipelinetest.Record {
	t.Helper()
	return l.waitWhere(t, func(r pipelinetest.Record) bool {
		return r.Message == "http request" && r.Attrs["operation"] == op && r.Attrs["code"] == code
	})
}

// waitWhere waits up to 3 s for a record that match accepts.
func (l shopLogs) waitWhere(t *testing.T, match func(pipelinetest.Record) bool) pipelinetest.Record {
	t.Helper()
	r, ok := l.WaitFor(3*time.Second, match)
	if !ok {
		t.Fatalf("no matching record in the log:\n%s", l)
	}
	return r
}

// String returns the records, one a line, for failure messages.
func (l shopLogs) String() string {
	var b strings.Builder
	for _, r := range l.Records() {
		fmt.Fprintf(&b, "%s %q %v\n", r.Level, r.Message, r.Attrs)
	}
	return b.String()
}

// probe is application middleware at the Handle stage: it sees each call
// right before its handler and watches the handler's context.
type probe struct {
	started  chan string    // operation ID, on entry
	ctxEnded chan time.Time // reports.export: when its context ended
	mu       sync.Mutex     // guards remaining
	// remaining is what was left of the deadline when billing.charge
	// started, per call.
	remaining []time.Duration
}

func newProbe() *probe {
	return &probe{started: make(chan string, 64), ctxEnded: make(chan time.Time, 64)}
}

func (p *probe) Invoke(ctx context.Context, inv *pipeline.Invocation, next pipeline.Handler) (any, error) {
	switch inv.OperationID() {
	case "billing.charge":
		p.mu.Lock()
		p.remaining = append(p.remaining, pipelinetest.Remaining(inv, time.Now()))
		p.mu.Unlock()
	case "reports.export":
		go func() {
			<-ctx.Done() // the kernel ends it when the call returns, at the latest
			p.ctxEnded <- time.Now()
		}()
	}
	select {
	case p.started <- inv.OperationID():
	default:
	}
	return next(ctx, inv)
}

// shopServer is `shop serve` running in-process on 127.0.0.1.
type shopServer struct {
	url    string
	logs   shopLogs
	probe  *probe
	client *http.Client
}

// startShopHTTP runs serve with o (addresses, logger and probe filled in)
// until the test ends, then checks that it shut down cleanly.
func startShopHTTP(t *testing.T, o shopcmd.ServeOptions) *shopServer {
	t.Helper()
	s := &shopServer{logs: newShopLogs(), probe: newProbe(), client: &http.Client{Transport: &http.Transport{}}}
	o.HTTPAddr, o.GRPCAddr = "127.0.0.1:0", "127.0.0.1:0"
	o.Logger = s.logs.Logger()
	o.KernelOptions = append(o.KernelOptions, kernel.UseAt(pipeline.StageHandle, s.probe))
	addr := make(chan string, 1)
	o.Ready = func(a string) { addr <- a }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- shopcmd.Serve(ctx, o) }()
	select {
	case a := <-addr:
		s.url = "http://" + a
	case err := <-done:
		cancel()
		t.Fatalf("serve() = %v before listening", err)
	}
	t.Cleanup(func() {
		s.client.CloseIdleConnections()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve() after shutdown = %v, want nil", err)
		}
	})
	return s
}

type shopResponse struct {
	status  int
	header  http.Header
	body    string
	problem map[string]any
}

func (s *shopServer) call(t *testing.T, method, path, body string, header map[string]string) shopResponse {
	t.Helper()
	req, err := http.NewRequest(method, s.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	r := shopResponse{status: resp.StatusCode, header: resp.Header, body: string(b)}
	if resp.Header.Get("Content-Type") == httpadapter.ContentTypeProblem {
		if err := json.Unmarshal(b, &r.problem); err != nil {
			t.Fatalf("%s %s: problem body %q: %v", method, path, b, err)
		}
	}
	return r
}

// wantProblem checks every member of a Problem Details body. detail ""
// skips the detail; details nil skips them.
func wantProblem(t *testing.T, r shopResponse, status int, kind, code, instance, detail string, details map[string]any) {
	t.Helper()
	if r.status != status || r.problem == nil {
		t.Fatalf("status %d, Content-Type %q, body %s; want %d Problem Details", r.status, r.header.Get("Content-Type"), r.body, status)
	}
	// A constraint outcome's failing fields are in details.errors.
	members := []string{"type", "title", "status", "detail", "instance", "code", "traceId", "details"}
	if len(r.problem) != len(members) {
		t.Errorf("problem members = %d (%s), want exactly %v", len(r.problem), r.body, members)
	}
	want := map[string]any{"type": "urn:sundial:error:" + code, "title": kind, "status": float64(status), "instance": instance, "code": code}
	if detail != "" {
		want["detail"] = detail
	}
	for k, v := range want {
		if r.problem[k] != v {
			t.Errorf("problem[%q] = %#v, want %#v (body %s)", k, r.problem[k], v, r.body)
		}
	}
	if id, ok := r.problem["traceId"].(string); !ok || (id != "" && len(id) != 32) {
		t.Errorf("traceId = %#v, want \"\" or 32 hex digits", r.problem["traceId"])
	}
	if details != nil {
		got, _ := json.Marshal(r.problem["details"])
		exp, _ := json.Marshal(details)
		if string(got) != string(exp) {
			t.Errorf("details = %s, want %s", got, exp)
		}
	}
}

// retryAfterOf returns details.retryAfter, checking it is a whole number of
// seconds in [1, max] and that the Retry-After header says the same.
func retryAfterOf(t *testing.T, r shopResponse, max int) int {
	t.Helper()
	d, _ := r.problem["details"].(map[string]any)
	f, ok := d["retryAfter"].(float64)
	n := int(f)
	if !ok || float64(n) != f || n < 1 || n > max {
		t.Fatalf("details.retryAfter = %v, want whole seconds in [1, %d]", d["retryAfter"], max)
	}
	if h := r.header.Get("Retry-After"); h != strconv.Itoa(n) {
		t.Errorf("Retry-After = %q, want %q", h, strconv.Itoa(n))
	}
	return n
}

// The README's quickstart: orders.create admits 2 calls per 60 s.
func TestShopThreeOrders(t *testing.T) {
	s := startShopHTTP(t, shopcmd.ServeOptions{})
	for i, want := range []string{`{"id":"ord-1","name":"widget","amount":1}`, `{"id":"ord-2","name":"widget","amount":1}`} {
		r := s.call(t, "POST", "/orders", `{"name":"widget","amount":1}`, nil)
		if r.status != 201 || r.body != want {
			t.Fatalf("order %d: %d %s, want 201 %s", i+1, r.status, r.body, want)
		}
	}
	r := s.call(t, "POST", "/orders", `{"name":"widget","amount":1}`, nil)
	if r.status != 503 {
		t.Fatalf("order 3: %d %s, want 503", r.status, r.body)
	}
	n := retryAfterOf(t, r, 60)
	wantProblem(t, r, 503, "UNAVAILABLE", resilience.CodeRateLimited, "/orders",
		resilience.RateLimited("orders.create", time.Duration(n)*time.Second).Message(),
		map[string]any{"id": "orders.create", "retryAfter": n})
	t.Logf("order 3: %d Retry-After: %s\n%s", r.status, r.header.Get("Retry-After"), r.body)
}

func TestShopPastDeadlineNeverRuns(t *testing.T) {
	s := startShopHTTP(t, shopcmd.ServeOptions{})
	// orders.create allows 2 calls a minute: neither past deadline spends
	// one. The zero time is Go's time.Time{}, which means "no deadline"
	// inside the kernel: it was taken as none (the call ran, 201).
	for _, past := range []string{
		time.Now().Add(-time.Second).UTC().Format("2006-01-02T15:04:05.000Z"),
		"0001-01-01T00:00:00Z",
	} {
		start := time.Now()
		r := s.call(t, "POST", "/orders", `{"name":"widget","amount":1}`, map[string]string{httpadapter.HeaderDeadline: past})
		took := time.Since(start)
		wantProblem(t, r, 504, "TIMEOUT", pipeline.CodeTimeout, "/orders", pipeline.ErrTimeout().Message(), map[string]any{})
		select {
		case op := <-s.probe.started:
			t.Fatalf("the handler of %s ran for the past deadline %s", op, past)
		default:
		}
		t.Logf("Sundial-Deadline %s: %d after %v, handler not run", past, r.status, took.Round(10*time.Microsecond))
	}
	// Nothing was stored, and the rate limit was not spent: the next two
	// orders are the first two.
	wantProblem(t, s.call(t, "GET", "/orders/ord-1", "", nil), 404, "NOT_FOUND", "SHOP_NOT_FOUND_001", "/orders/ord-1", "", nil)
	for _, id := range []string{"ord-1", "ord-2"} {
		if r := s.call(t, "POST", "/orders", `{"name":"widget","amount":1}`, nil); r.status != 201 || !strings.Contains(r.body, `"id":"`+id+`"`) {
			t.Errorf("POST /orders = %d %s, want 201 with id %s", r.status, r.body, id)
		}
	}
}

func TestShopMalformedDeadline(t *testing.T) {
	s := startShopHTTP(t, shopcmd.ServeOptions{})
	tests := []struct {
		name, header, value string
	}{
		{"not a timestamp", httpadapter.HeaderDeadline, "in five seconds"},
		{"absurd precision", httpadapter.HeaderDeadline, "2099-01-01T00:00:00.000000000001Z"},
		{"overflowing year", httpadapter.HeaderDeadline, "99999-01-01T00:00:00Z"},
		{"local offset", httpadapter.HeaderDeadline, "2099-01-01T00:00:00+02:00"},
		{"overflowing milliseconds", httpadapter.DefaultRelativeDeadlineHeader, "18446744073709551616"},
		{"fractional milliseconds", httpadapter.DefaultRelativeDeadlineHeader, "250.5"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := s.call(t, "POST", "/reports/export", `{"delayMs":0}`, map[string]string{tt.header: tt.value})
			wantProblem(t, r, 400, "VALIDATION", "KERNEL_VALIDATION_002", "/reports/export", "", map[string]any{"field": tt.header})
		})
	}
}

func TestShopDeadlineCutsLongCall(t *testing.T) {
	s := startShopHTTP(t, shopcmd.ServeOptions{})
	start := time.Now()
	deadline := start.Add(300 * time.Millisecond).UTC().Format("2006-01-02T15:04:05.000Z")
	r := s.call(t, "POST", "/reports/export", `{"delayMs":2000}`, map[string]string{httpadapter.HeaderDeadline: deadline})
	took := time.Since(start)
	wantProblem(t, r, 504, "TIMEOUT", pipeline.CodeTimeout, "/reports/export", "", map[string]any{})
	// The 504 TIMEOUT says the deadline cut the 2 s export; timers never
	// fire early.
	if took < 290*time.Millisecond {
		t.Errorf("a 300 ms deadline on a 2 s export answered after %v, before the deadline", took)
	}
	s.logs.waitRecord(t, "reports.export", pipeline.CodeTimeout)
}

func TestShopClientDisconnect(t *testing.T) {
	s := startShopHTTP(t, shopcmd.ServeOptions{})
	conn, err := net.Dial("tcp", strings.TrimPrefix(s.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	body := `{"delayMs":5000}`
	fmt.Fprintf(conn, "POST /reports/export HTTP/1.1\r\nHost: shop\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	select {
	case <-s.probe.started:
	case <-time.After(5 * time.Second):
		t.Fatal("reports.export did not start")
	}
	gone := time.Now()
	conn.Close()
	select {
	case ended := <-s.probe.ctxEnded:
		if d := ended.Sub(gone); d > 100*time.Millisecond {
			t.Errorf("the handler's context ended %v after the client left, want within 100 ms", d)
		} else {
			t.Logf("the handler's context ended %v after the client left", d)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("the handler's context did not end after the client left")
	}
	if rec := s.logs.waitRecord(t, "reports.export", pipeline.CodeCanceled); rec.Attrs["status"] != int64(408) {
		t.Errorf("access record = %v, want status 408", rec.Attrs)
	}
}

func TestShopBreakerOpens(t *testing.T) {
	s := startShopHTTP(t, shopcmd.ServeOptions{})
	for i := 1; i <= 5; i++ {
		r := s.call(t, "POST", "/billing/charge", `{"amount":5,"fail":true}`, nil)
		wantProblem(t, r, 503, "UNAVAILABLE", "SHOP_UNAVAILABLE_001", "/billing/charge", "The payment provider is unavailable.", map[string]any{})
		if h := r.header.Get("Retry-After"); h != "" {
			t.Errorf("call %d: Retry-After %q on a failure without retryAfter", i, h)
		}
	}
	for _, body := range []string{`{"amount":5,"fail":true}`, `{"amount":5,"fail":false}`} {
		r := s.call(t, "POST", "/billing/charge", body, nil)
		if r.status != 503 {
			t.Fatalf("with the breaker open, %s = %d %s, want 503", body, r.status, r.body)
		}
		n := retryAfterOf(t, r, 30)
		wantProblem(t, r, 503, "UNAVAILABLE", resilience.CodeCircuitOpen, "/billing/charge",
			resilience.CircuitOpen("billing.charge", time.Duration(n)*time.Second).Message(),
			map[string]any{"id": "billing.charge", "retryAfter": n})
	}
}

// A client using the Transport retries billing.charge within one 2 s
// budget: the shop sees less time left on every attempt.
func TestShopTransportRetriesOneBudget(t *testing.T) {
	s := startShopHTTP(t, shopcmd.ServeOptions{})
	client := &http.Client{Transport: httpadapter.NewTransport(&http.Transport{}, httpadapter.WithHosts("127.0.0.1"))}
	defer client.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	const backoff = 150 * time.Millisecond
	for attempt := 1; attempt <= 3; attempt++ {
		req, _ := http.NewRequestWithContext(ctx, "POST", s.url+"/billing/charge", strings.NewReader(`{"amount":5,"fail":true}`))
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 503 {
			t.Fatalf("attempt %d: %d, want 503", attempt, resp.StatusCode)
		}
		if attempt < 3 {
			time.Sleep(backoff) // the back-off spends the budget too
		}
	}
	s.probe.mu.Lock()
	got := append([]time.Duration(nil), s.probe.remaining...)
	s.probe.mu.Unlock()
	if len(got) != 3 {
		t.Fatalf("billing.charge ran %d times, want 3", len(got))
	}
	for i, rem := range got {
		if rem > 2*time.Second || rem < time.Second {
			t.Errorf("attempt %d started with %v left, want within the 2 s budget", i+1, rem)
		}
		if i > 0 && got[i-1]-rem < backoff {
			t.Errorf("attempt %d started with %v left after %v, want at least %v less", i+1, rem, got[i-1], backoff)
		}
	}
	t.Logf("time left at each attempt: %v", got)
}

func TestShopHTTPErrors(t *testing.T) {
	s := startShopHTTP(t, shopcmd.ServeOptions{})
	tests := []struct {
		name, method, path, body string
		status                   int
		kind, code               string
		details                  map[string]any
	}{
		{"body over the limit", "POST", "/orders", `{"name":"` + strings.Repeat("x", 1<<20) + `"}`, 413, "VALIDATION", "HTTP_VALIDATION_003", map[string]any{"limit": 1 << 20}},
		{"malformed body", "POST", "/orders", `{"name":"widget","amount":}`, 400, "VALIDATION", "HTTP_VALIDATION_001", nil},
		{"wrong type", "POST", "/orders", `{"name":"widget","amount":"one"}`, 400, "VALIDATION", "HTTP_VALIDATION_002", map[string]any{"expected": "integer", "field": "amount"}},
		{"failed validation", "POST", "/orders", `{"name":"","amount":1}`, 400, "VALIDATION", operations.CodeConstraint,
			map[string]any{"errors": []any{map[string]any{"field": "/name", "rule": "required", "message": "is required."}}}},
		{"no such route", "GET", "/nope", "", 404, "NOT_FOUND", "HTTP_NOT_FOUND_001", map[string]any{}},
		{"wrong method", "GET", "/orders", "", 405, "NOT_FOUND", "HTTP_NOT_FOUND_002", map[string]any{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := s.call(t, tt.method, tt.path, tt.body, nil)
			wantProblem(t, r, tt.status, tt.kind, tt.code, tt.path, "", tt.details)
		})
	}
	if r := s.call(t, "GET", "/healthz", "", nil); r.status != 200 || r.body != "{\"status\":\"ok\"}\n" {
		t.Errorf("GET /healthz = %d %q, want 200 {\"status\":\"ok\"}", r.status, r.body)
	}
}

// TestShopServerTimeouts: the shop's HTTP server closes a connection
// whose headers never finish at ReadHeaderTimeout, and an idle keep-alive
// connection at IdleTimeout, no sooner. In a synctest bubble over an
// in-memory network, net/http's timers are the bubble's: the connection
// closes at the timeout exactly. Through serve on 127.0.0.1, the options
// are in force: the server closes the connection itself, before the
// default timeouts would.
func TestShopServerTimeouts(t *testing.T) {
	srv := shopcmd.NewHTTPServer(nil, shopcmd.ServeOptions{})
	if srv.ReadHeaderTimeout != 5*time.Second || srv.IdleTimeout != 2*time.Minute || srv.MaxHeaderBytes != 64<<10 {
		t.Errorf("shopcmd.NewHTTPServer() timeouts = ReadHeader %v, Idle %v, MaxHeaderBytes %d; want 5s, 2m0s, 65536",
			srv.ReadHeaderTimeout, srv.IdleTimeout, srv.MaxHeaderBytes)
	}
	if srv.ReadTimeout != 0 || srv.WriteTimeout != 0 {
		t.Errorf("shopcmd.NewHTTPServer() ReadTimeout %v, WriteTimeout %v; want none (deadlines bound calls)", srv.ReadTimeout, srv.WriteTimeout)
	}

	opts := shopcmd.ServeOptions{ReadHeaderTimeout: 200 * time.Millisecond, IdleTimeout: 300 * time.Millisecond}
	tests := []struct {
		name string
		send string
		want time.Duration // when the server closes the connection
		dflt time.Duration // when it would with the default timeouts
	}{
		{"slowloris: headers never finish", "POST /orders HTTP/1.1\r\nHost: shop\r\nX-Slow: 1", opts.ReadHeaderTimeout, shopcmd.DefaultReadHeaderTimeout},
		{"idle keep-alive connection", "GET /healthz HTTP/1.1\r\nHost: shop\r\n\r\n", opts.IdleTimeout, shopcmd.DefaultIdleTimeout},
	}
	// untilClosed sends tt.send on conn and reads until the server closes
	// it, for at most limit; it returns how long that took.
	untilClosed := func(t *testing.T, conn net.Conn, send string, limit time.Duration) time.Duration {
		t.Helper()
		start := time.Now()
		if _, err := io.WriteString(conn, send); err != nil {
			t.Fatal(err)
		}
		conn.SetReadDeadline(start.Add(limit))
		_, err := io.Copy(io.Discard, conn) // until the server closes
		took := time.Since(start)
		if err != nil {
			t.Fatalf("reading until the server closes: %v after %v", err, took)
		}
		return took
	}
	for _, tt := range tests {
		t.Run(tt.name+"/in a bubble", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })
				srv := shopcmd.NewHTTPServer(ok, opts)
				ln := pipenet.Listen()
				served := make(chan error, 1)
				go func() { served <- srv.Serve(ln) }()
				conn, err := ln.Dial()
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				if took := untilClosed(t, conn, tt.send, tt.dflt); took != tt.want {
					t.Errorf("the server closed the connection after %v, want %v", took, tt.want)
				}
				srv.Close()
				if err := <-served; !errors.Is(err, http.ErrServerClosed) {
					t.Errorf("Serve() = %v, want http.ErrServerClosed", err)
				}
			})
		})
	}
	s := startShopHTTP(t, opts)
	for _, tt := range tests {
		t.Run(tt.name+"/served", func(t *testing.T) {
			// The server may start its timer as soon as it accepts, before
			// the client writes: measure from before the dial.
			before := time.Now()
			conn, err := net.Dial("tcp", strings.TrimPrefix(s.url, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			// Timers never fire early; and a close before the default
			// timeout's (the read would fail at the limit) is the option's.
			untilClosed(t, conn, tt.send, tt.dflt-time.Second)
			if took := time.Since(before); took < tt.want {
				t.Errorf("the server closed the connection after %v, before its %v timeout", took, tt.want)
			}
		})
	}
}

// shopProcess runs the test binary as the shop (see runMainEnv).
func shopProcess(t *testing.T, args ...string) (*exec.Cmd, string, *syncBuffer) {
	t.Helper()
	return shopProcessEnv(t, nil, args...)
}

// shopProcessEnv is shopProcess with env added to the environment (which
// holds no SUNDIAL_ or OTEL_ variable of the test's own). Its stderr may be
// read while it runs.
func shopProcessEnv(t *testing.T, env []string, args ...string) (*exec.Cmd, string, *syncBuffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = childEnv(env...)
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	// The first "serving" line may be gRPC's; read up to HTTP's.
	br := bufio.NewReader(out)
	line, err := br.ReadString('\n')
	for err == nil && !strings.HasPrefix(line, "shop: serving HTTP on ") {
		line, err = br.ReadString('\n')
	}
	if err != nil {
		t.Fatalf("shop %v printed no address: %v; stderr:\n%s", args, err, stderr)
	}
	url := strings.TrimSpace(strings.TrimPrefix(line, "shop: serving HTTP on "))
	if !strings.HasPrefix(url, "http://127.0.0.1:") {
		t.Fatalf("shop printed %q, want its HTTP address", line)
	}
	go io.Copy(io.Discard, out)
	return cmd, url, stderr
}

func TestShopGracefulShutdown(t *testing.T) {
	tests := []struct {
		name     string
		grace    string
		delayMs  int
		wantCode int // exit code; 0 only for a clean shutdown
		wantOK   bool
		maxExit  time.Duration // after the signal
	}{
		{"in-flight call finishes", "10s", 1000, 0, true, 3 * time.Second},
		{"grace exhausted", "300ms", 10000, 1, false, 3 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cmd, url, stderr := shopProcess(t, "serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--grace", tt.grace)
			client := &http.Client{Transport: &http.Transport{}}
			defer client.CloseIdleConnections()
			type result struct {
				status int
				body   string
				err    error
			}
			res := make(chan result, 1)
			go func() {
				resp, err := client.Post(url+"/reports/export", "application/json", strings.NewReader(fmt.Sprintf(`{"delayMs":%d}`, tt.delayMs)))
				if err != nil {
					res <- result{err: err}
					return
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				res <- result{status: resp.StatusCode, body: string(b)}
			}()
			time.Sleep(200 * time.Millisecond) // let the call get under way
			signalled := time.Now()
			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			r := <-res
			err := cmd.Wait()
			exited := time.Since(signalled)
			if code := cmd.ProcessState.ExitCode(); code != tt.wantCode {
				t.Errorf("exit code %d (%v), want %d; stderr:\n%s", code, err, tt.wantCode, stderr)
			}
			if exited > tt.maxExit {
				t.Errorf("the shop exited %v after SIGTERM, want within %v", exited, tt.maxExit)
			}
			if tt.wantOK && (r.err != nil || r.status != 200) {
				t.Errorf("in-flight call = %d %q %v, want 200", r.status, r.body, r.err)
			}
			if !tt.wantOK && r.err == nil && r.status == 200 {
				t.Errorf("a call longer than the grace period succeeded: %q", r.body)
			}
			if !strings.Contains(stderr.String(), `"msg":"shop: shutting down"`) {
				t.Errorf("stderr lacks the shutdown record:\n%s", stderr)
			}
		})
	}
}
