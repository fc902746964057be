package systemtest

// Fault tests of the shop: what happens when a handler panics, when a
// downstream hangs, resets or talks nonsense, when a caller sends headers
// built to exhaust memory, and when tenant values are chosen to make a
// partitioned limiter allocate. Faults already covered elsewhere are not
// repeated here; docs/reliability.md lists every fault and its test.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sundial-go/sundial/adapters/httpadapter"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
	"github.com/sundial-go/sundial/resilience"
	"github.com/sundial-go/sundial/samples/shop/internal/shopcmd"
)

// faultConfig configures the test operations over the shop's defaults.
// inventory.check's TimeoutSeconds is checkTimeout.
const faultConfig = `{"Sundial":{"Kernel":{"Resilience":{"Operations":{
	"faults.panic":    {"FailureThreshold": 3, "BreakSeconds": 30},
	"inventory.check": {"TimeoutSeconds": 0.4}
}}}}}`

// checkTimeout is inventory.check's TimeoutSeconds in faultConfig.
const checkTimeout = 400 * time.Millisecond

// panicInput is the input of faults.panic.
type panicInput struct {
	Panic bool `json:"panic"`
}

// secretPanic is what faults.panic panics with: it must reach the log and
// never the caller.
const secretPanic = "secret panic text: card 4111-1111-1111-1111"

// checkInput is the input of inventory.check: which downstream behaviour
// to call (a path of the fake inventory service), or "refused" for an
// address nobody listens on, or "thirdparty" for the same call to a host
// that is not marked internal.
type checkInput struct {
	Mode string `json:"mode"`
}

// Validate implements operations.Validator.
func (c *checkInput) Validate() error {
	if c.Mode == "" {
		return pipeline.NewError(pipeline.KindValidation, "SHOP_VALIDATION_001", "mode must not be empty").WithDetail("field", "mode")
	}
	return nil
}

// stock is the inventory service's answer.
type stock struct {
	InStock int `json:"inStock"`
}

// inventoryClient is the outbound half of inventory.check: an http.Client
// whose Transport carries the invocation's deadline, trace context and
// baggage to the internal inventory host only.
type inventoryClient struct {
	internal, external, refused string // base URLs
	hc                          *http.Client
}

func newInventoryClient(internal, external *fakeDownstream, refused string) *inventoryClient {
	return &inventoryClient{
		internal: "http://" + internal.addr, external: "http://" + external.addr, refused: "http://" + refused,
		hc: &http.Client{Transport: httpadapter.NewTransport(&http.Transport{}, httpadapter.WithHosts(internal.addr))},
	}
}

// check is the handler of inventory.check.
func (c *inventoryClient) check(ctx context.Context, in checkInput) (stock, error) {
	url := c.internal + "/" + in.Mode
	switch in.Mode {
	case "refused":
		url = c.refused + "/ok"
	case "thirdparty":
		url = c.external + "/ok"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return stock{}, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return stock{}, outboundError(err)
	}
	defer resp.Body.Close()
	var s stock
	err = json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&s)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("status %d", resp.StatusCode)
	}
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			return stock{}, err
		}
		return stock{}, pipeline.Wrap(pipeline.KindUnavailable, "SHOP_UNAVAILABLE_003",
			"The inventory service sent a malformed answer.", err).WithDetail("dependency", "inventory")
	}
	return s, nil
}

// outboundError classifies a request that got no HTTP answer. The end of
// the invocation's own context is returned as it is, for the
// DeadlineMiddleware to attribute (TIMEOUT or CANCELLED); a network
// timeout is a TIMEOUT; anything else — refused, reset, bytes that are not
// HTTP — is UNAVAILABLE.
func outboundError(err error) error {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return err
	}
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		return pipeline.Wrap(pipeline.KindTimeout, "SHOP_TIMEOUT_001", "The inventory service did not answer in time.", err).
			WithDetail("dependency", "inventory")
	}
	return pipeline.Wrap(pipeline.KindUnavailable, "SHOP_UNAVAILABLE_002", "The inventory service did not answer.", err).
		WithDetail("dependency", "inventory")
}

// faultKernelOptions registers the shop's operations plus faults.panic and
// inventory.check (calling inv), with faultConfig over the shop's config.
func faultKernelOptions(t *testing.T, inv *inventoryClient) []kernel.Option {
	t.Helper()
	reg, err := shopcmd.NewRegistry()
	if err != nil {
		t.Fatal(err)
	}
	err = errors.Join(
		operations.Register(reg, operations.Descriptor{ID: "faults.panic", Method: "POST", Path: "/faults/panic"},
			func(_ context.Context, in panicInput) (struct {
				OK bool `json:"ok"`
			}, error) {
				if in.Panic {
					panic(secretPanic)
				}
				return struct {
					OK bool `json:"ok"`
				}{true}, nil
			}),
		operations.Register(reg, operations.Descriptor{ID: "inventory.check", Method: "POST", Path: "/inventory/check"}, inv.check),
	)
	if err != nil {
		t.Fatal(err)
	}
	return []kernel.Option{kernel.WithRegistry(reg), kernel.WithConfigJSON([]byte(faultConfig))}
}

// fakeDownstream is an inventory service on 127.0.0.1 that misbehaves on
// request: GET /ok answers {"inStock":3}; /hang reads the request and
// never answers; /reset closes the connection with a TCP RST; /garbage
// answers bytes that are not HTTP; /badjson answers 200 with an HTML body.
// It records the headers of every request.
type fakeDownstream struct {
	addr string
	ln   net.Listener
	done chan struct{}
	wg   sync.WaitGroup

	mu      sync.Mutex // guards conns and headers
	conns   map[net.Conn]bool
	headers []http.Header
}

func startFakeDownstream(t *testing.T) *fakeDownstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := &fakeDownstream{addr: ln.Addr().String(), ln: ln, done: make(chan struct{}), conns: make(map[net.Conn]bool)}
	d.wg.Add(1)
	go d.accept()
	t.Cleanup(d.close)
	return d
}

func (d *fakeDownstream) accept() {
	defer d.wg.Done()
	for {
		conn, err := d.ln.Accept()
		if err != nil {
			return
		}
		d.mu.Lock()
		d.conns[conn] = true
		d.mu.Unlock()
		d.wg.Add(1)
		go d.serveConn(conn)
	}
}

func (d *fakeDownstream) serveConn(conn net.Conn) {
	defer d.wg.Done()
	defer func() {
		d.mu.Lock()
		delete(d.conns, conn)
		d.mu.Unlock()
		conn.Close()
	}()
	br := bufio.NewReader(conn)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		d.mu.Lock()
		d.headers = append(d.headers, req.Header.Clone())
		d.mu.Unlock()
		switch req.URL.Path {
		case "/ok":
			writeRaw(conn, "200 OK", "application/json", `{"inStock":3}`)
		case "/badjson":
			writeRaw(conn, "200 OK", "application/json", "<html>Service Temporarily Unavailable</html>")
		case "/hang":
			<-d.done
			return
		case "/reset":
			conn.(*net.TCPConn).SetLinger(0) // Close sends RST
			return
		case "/garbage":
			io.WriteString(conn, "\x00\x17\x03 this is not HTTP \xff\xfe\r\n\r\n")
			return
		default:
			writeRaw(conn, "404 Not Found", "text/plain", "no such path")
		}
	}
}

func writeRaw(w io.Writer, status, contentType, body string) {
	fmt.Fprintf(w, "HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s", status, contentType, len(body), body)
}

// lastHeader returns the headers of the latest request.
func (d *fakeDownstream) lastHeader(t *testing.T) http.Header {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.headers) == 0 {
		t.Fatal("the downstream received no request")
	}
	return d.headers[len(d.headers)-1]
}

// close stops accepting, releases the hanging handlers, closes every
// connection and waits for its goroutines.
func (d *fakeDownstream) close() {
	d.ln.Close()
	close(d.done)
	d.mu.Lock()
	for c := range d.conns {
		c.Close()
	}
	d.mu.Unlock()
	d.wg.Wait()
}

// refusedAddr returns a 127.0.0.1 address that nobody listens on.
func refusedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// A handler that panics: the caller gets a 500 UNEXPECTED that says
// nothing of the panic, the log gets all of it, the breaker counts it as a
// failure, and the process serves on.
func TestFaultHandlerPanics(t *testing.T) {
	inv := newInventoryClient(startFakeDownstream(t), startFakeDownstream(t), refusedAddr(t))
	s := startShopHTTP(t, shopcmd.ServeOptions{KernelOptions: faultKernelOptions(t, inv)})
	for i := 1; i <= 3; i++ {
		r := s.call(t, "POST", "/faults/panic", `{"panic":true}`, nil)
		wantProblem(t, r, 500, "UNEXPECTED", pipeline.CodeUnexpected, "/faults/panic", pipeline.UnexpectedMessage, map[string]any{})
		for _, leak := range []string{"secret", "4111", "goroutine", ".go:"} {
			if strings.Contains(r.body, leak) {
				t.Errorf("panic %d: the body leaks %q: %s", i, leak, r.body)
			}
		}
	}
	// FailureThreshold 3: the three panics opened the breaker, so even a
	// healthy call is turned away now.
	r := s.call(t, "POST", "/faults/panic", `{"panic":false}`, nil)
	if r.status != 503 {
		t.Fatalf("after 3 panics: %d %s, want 503 (breaker open)", r.status, r.body)
	}
	n := retryAfterOf(t, r, 30)
	wantProblem(t, r, 503, "UNAVAILABLE", resilience.CodeCircuitOpen, "/faults/panic",
		resilience.CircuitOpen("faults.panic", time.Duration(n)*time.Second).Message(), map[string]any{"id": "faults.panic", "retryAfter": n})

	// The process is alive and its other operations unaffected.
	if r := s.call(t, "POST", "/orders", `{"name":"widget","amount":1}`, nil); r.status != 201 {
		t.Errorf("POST /orders after the panics = %d %s, want 201", r.status, r.body)
	}
	if r := s.call(t, "GET", "/healthz", "", nil); r.status != 200 {
		t.Errorf("GET /healthz after the panics = %d %s, want 200", r.status, r.body)
	}
	// What the caller did not get is in the log, with the stack.
	rec := s.logs.waitWhere(t, func(r pipelinetest.Record) bool { return r.Message == "sundial: panic recovered" })
	if rec.Level != slog.LevelError || rec.Attrs["operation"] != "faults.panic" || rec.Attrs["panic"] != secretPanic || !strings.Contains(fmt.Sprint(rec.Attrs["stack"]), "fault_test.go") {
		t.Errorf("panic record = %v %v, want ERROR for faults.panic with the panic value and a stack through fault_test.go", rec.Level, rec.Attrs)
	}
	if rec := s.logs.waitRecord(t, "faults.panic", pipeline.CodeUnexpected); rec.Level != slog.LevelError || rec.Attrs["status"] != int64(500) {
		t.Errorf("access record = %v %v, want level ERROR status 500", rec.Level, rec.Attrs)
	}
}

// A downstream that hangs, resets the connection, refuses it or answers
// garbage: the caller gets a TIMEOUT at the deadline or an UNAVAILABLE
// with a code saying which, and never the internal error text.
//
// On a loaded machine the deadline (TimeoutSeconds 0.4) can pass before
// the kernel starts inventory.check's handler: it then calls no
// downstream, and the answer is its TIMEOUT. Such a call is made again on
// a fresh shop whose deadline is ten times as long (within the shop's
// MaxTimeoutSeconds), three tries in all; what the answer's timing must
// be is measured against the deadline of the call whose handler ran.
func TestFaultDownstream(t *testing.T) {
	internal, external := startFakeDownstream(t), startFakeDownstream(t)
	inv := newInventoryClient(internal, external, refusedAddr(t))
	t.Cleanup(inv.hc.CloseIdleConnections)
	// faultShop is a shop whose inventory.check has the deadline d; its
	// handler starts are counted. Its client gives up on a call 20 s after
	// that deadline.
	type faultShop struct {
		s      *shopServer
		starts *handlerStarts
		d      time.Duration
	}
	newShop := func(t *testing.T, d time.Duration) faultShop {
		t.Helper()
		starts := newHandlerStarts("inventory.check")
		opts := append(faultKernelOptions(t, inv), starts.options()...)
		if d != checkTimeout {
			opts = append(opts, kernel.WithConfigJSON(fmt.Appendf(nil,
				`{"Sundial":{"Kernel":{"Resilience":{"Operations":{"inventory.check":{"TimeoutSeconds":%g}}}}}}`, d.Seconds())))
		}
		s := startShopHTTP(t, shopcmd.ServeOptions{KernelOptions: opts})
		s.client.Timeout = d + 20*time.Second
		return faultShop{s, starts, d}
	}
	first := newShop(t, checkTimeout)
	// check calls inventory.check in mode, and returns the answer, how long
	// it took and the deadline of the call: of the try whose handler ran.
	check := func(t *testing.T, mode string, hdr map[string]string) (shopResponse, time.Duration, time.Duration) {
		t.Helper()
		sh := first
		for try := 1; ; try++ {
			mark := sh.starts.mark()
			start := time.Now()
			r := sh.s.call(t, "POST", "/inventory/check", `{"mode":"`+mode+`"}`, hdr)
			took := time.Since(start)
			if sh.starts.ran(t, mark) {
				return r, took, sh.d
			}
			if r.status != 504 || r.problem["code"] != pipeline.CodeTimeout {
				t.Fatalf("mode %s (deadline %v): %d %s before its handler started, want its TIMEOUT", mode, sh.d, r.status, r.body)
			}
			if try == 3 {
				t.Fatalf("mode %s: the handler did not start before its deadline in 3 tries (the last %v)", mode, sh.d)
			}
			t.Logf("mode %s: the handler did not start before its %v deadline: once more on a fresh shop, with ten times it", mode, sh.d)
			// No deadline is longer than the shop's MaxTimeoutSeconds, 30.
			sh = newShop(t, min(10*sh.d, 30*time.Second))
		}
	}
	tests := []struct {
		mode   string
		status int
		kind   string
		code   string
		// atDeadline: the answer comes at the deadline, within 600 ms
		// after it; otherwise before it.
		atDeadline bool
	}{
		// inventory.check has TimeoutSeconds 0.4 and the caller sends no
		// deadline: a hang ends there, every other fault before it.
		{"hang", 504, "TIMEOUT", pipeline.CodeTimeout, true},
		{"reset", 503, "UNAVAILABLE", "SHOP_UNAVAILABLE_002", false},
		{"refused", 503, "UNAVAILABLE", "SHOP_UNAVAILABLE_002", false},
		{"garbage", 503, "UNAVAILABLE", "SHOP_UNAVAILABLE_002", false},
		{"badjson", 503, "UNAVAILABLE", "SHOP_UNAVAILABLE_003", false},
	}
	for _, tt := range tests {
		t.Run(tt.mode, func(t *testing.T) {
			r, took, d := check(t, tt.mode, nil)
			details := map[string]any{"dependency": "inventory"}
			if tt.kind == "TIMEOUT" {
				details = map[string]any{}
			}
			wantProblem(t, r, tt.status, tt.kind, tt.code, "/inventory/check", "", details)
			lo, hi := time.Duration(0), d
			if tt.atDeadline {
				lo, hi = d, d+600*time.Millisecond
			}
			if took < lo || took > hi {
				t.Errorf("answered after %v, want between %v and %v (deadline %v)", took, lo, hi, d)
			}
			for _, leak := range []string{"127.0.0.1", "reset by peer", "malformed HTTP", "invalid character", "refused"} {
				if strings.Contains(r.body, leak) {
					t.Errorf("the body leaks %q: %s", leak, r.body)
				}
			}
		})
	}

	// The deadline goes to the internal host and nowhere else.
	t.Run("deadline headers only to internal hosts", func(t *testing.T) {
		hdr := map[string]string{"Baggage": "tenant=acme", "Traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
		r, _, d := check(t, "ok", hdr)
		if r.status != 200 || r.body != `{"inStock":3}` {
			t.Fatalf("mode ok = %d %s, want 200 {\"inStock\":3}", r.status, r.body)
		}
		h := internal.lastHeader(t)
		ms, err := strconv.Atoi(h.Get(httpadapter.DefaultRelativeDeadlineHeader))
		if err != nil || ms <= 0 || ms > int(d.Milliseconds()) {
			t.Errorf("internal host: %s = %q, want 1..%d ms (TimeoutSeconds %g)", httpadapter.DefaultRelativeDeadlineHeader, h.Get(httpadapter.DefaultRelativeDeadlineHeader), d.Milliseconds(), d.Seconds())
		}
		if h.Get(httpadapter.HeaderDeadline) == "" || !strings.Contains(h.Get("Traceparent"), "4bf92f3577b34da6a3ce929d0e0e4736") || h.Get("Baggage") != "tenant=acme" {
			t.Errorf("internal host got %v, want Sundial-Deadline, the caller's trace and its baggage", h)
		}
		if r, _, _ := check(t, "thirdparty", hdr); r.status != 200 {
			t.Fatalf("mode thirdparty = %d %s, want 200", r.status, r.body)
		}
		h = external.lastHeader(t)
		for _, name := range []string{httpadapter.HeaderDeadline, httpadapter.DefaultRelativeDeadlineHeader, "Traceparent", "Tracestate", "Baggage"} {
			if v := h.Get(name); v != "" {
				t.Errorf("third-party host got %s: %q, want nothing", name, v)
			}
		}
	})
}

// Headers built to use memory: a baggage header over the adapter's limit
// (8 KiB) is dropped with a log line and the call goes on; a header block
// over the server's MaxHeaderBytes (64 KiB) is refused by net/http with
// 431 before anything parses it; the shop serves on.
func TestFaultOversizedHeaders(t *testing.T) {
	s := startShopHTTP(t, shopcmd.ServeOptions{})
	big := "tenant=" + strings.Repeat("x", 10<<10)
	r := s.call(t, "POST", "/reports/export", `{"delayMs":0}`, map[string]string{"Baggage": big})
	if r.status != 200 {
		t.Fatalf("10 KiB baggage: %d %s, want 200 without the baggage", r.status, r.body)
	}
	rec := s.logs.waitWhere(t, func(r pipelinetest.Record) bool { return r.Message == "httpadapter: baggage header dropped" })
	if rec.Level != slog.LevelWarn || rec.Attrs["bytes"] != int64(len(big)) || rec.Attrs["limit"] != int64(8192) {
		t.Errorf("dropped-baggage record = %v %v, want WARN, bytes %d, limit %d", rec.Level, rec.Attrs, len(big), 8192)
	}

	req, _ := http.NewRequest("POST", s.url+"/reports/export", strings.NewReader(`{"delayMs":0}`))
	req.Header.Set("Baggage", "tenant="+strings.Repeat("x", 200<<10))
	resp, err := s.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("200 KiB header block: status %d, want 431", resp.StatusCode)
	}
	if r := s.call(t, "GET", "/healthz", "", nil); r.status != 200 {
		t.Errorf("GET /healthz afterwards = %d, want 200", r.status)
	}
}

// tenantLimit is the per-tenant limit of docs/resilience.md: one fixed
// window per tenant named in the caller's baggage.
type tenantLimit struct{ limits *resilience.KeyedFixedWindow }

func (m *tenantLimit) Invoke(ctx context.Context, inv *pipeline.Invocation, next pipeline.Handler) (any, error) {
	tenant, ok := inv.Baggage("tenant")
	if !ok {
		tenant = "anonymous"
	}
	retryAfter, err := m.limits.Wait(ctx, tenant)
	switch {
	case errors.Is(err, resilience.ErrLimited):
		return nil, resilience.RateLimited(inv.OperationID(), retryAfter)
	case err != nil:
		return nil, err
	}
	return next(ctx, inv)
}

// A flood of distinct tenant values, each in the caller's baggage, against
// a per-tenant limiter capped at 50 keys: the limiter never holds more
// than 50, the tenants beyond are turned away with 503 until a window
// frees, and a tenant that has a limiter keeps its limit.
func TestFaultTenantFloodIsBounded(t *testing.T) {
	const maxKeys = 50
	limits, err := resilience.NewKeyedFixedWindow(1, time.Minute, 0, resilience.WithMaxKeys(maxKeys))
	if err != nil {
		t.Fatal(err)
	}
	s := startShopHTTP(t, shopcmd.ServeOptions{KernelOptions: []kernel.Option{kernel.UseAt(pipeline.StageResilience, &tenantLimit{limits})}})
	counts := map[int]int{}
	for i := range 6 * maxKeys {
		r := s.call(t, "GET", "/orders/ord-0", "", map[string]string{"Baggage": fmt.Sprintf("tenant=t%d", i)})
		counts[r.status]++
		if r.status == 503 && r.problem["code"] != resilience.CodeRateLimited {
			t.Fatalf("tenant t%d: 503 with code %v, want %s", i, r.problem["code"], resilience.CodeRateLimited)
		}
		if n := limits.Len(); n > maxKeys {
			t.Fatalf("after %d tenants: the limiter holds %d keys, want at most %d", i+1, n, maxKeys)
		}
	}
	// Admitted tenants reach orders.get, which finds no ord-0: 404.
	if counts[404] != maxKeys || counts[503] != 5*maxKeys || len(counts) != 2 {
		t.Errorf("statuses = %v, want %d x 404 and %d x 503", counts, maxKeys, 5*maxKeys)
	}
	r := s.call(t, "GET", "/orders/ord-0", "", map[string]string{"Baggage": "tenant=t0"})
	if r.status != 503 || retryAfterOf(t, r, 60) < 2 {
		t.Errorf("tenant t0's second call in its window = %d %s, want 503 retrying after most of a minute", r.status, r.body)
	}
}
