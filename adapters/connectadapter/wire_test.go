package connectadapter_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sundial-go/sundial/adapters/connectadapter"
)

// wireError is a Connect error as JSON on the wire.
type wireError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Details []struct {
		Type  string          `json:"type"`
		Value string          `json:"value"`
		Debug json.RawMessage `json:"debug"`
	} `json:"details"`
}

// answer is one HTTP answer.
type answer struct {
	status int
	header http.Header
	body   string
	err    wireError // when the body is a Connect error
}

// post sends a Connect unary request with a JSON body, as curl or a
// browser's fetch does, with the headers hdr.
func post(t testing.TB, hc *http.Client, u, body string, hdr map[string]string) answer {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	return do(t, hc, req)
}

func do(t testing.TB, hc *http.Client, req *http.Request) answer {
	t.Helper()
	res, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	a := answer{status: res.StatusCode, header: res.Header, body: string(b)}
	if res.StatusCode != http.StatusOK && strings.HasPrefix(res.Header.Get("Content-Type"), "application/json") {
		if err := json.Unmarshal(b, &a.err); err != nil {
			t.Fatalf("error body %s: %v", b, err)
		}
	}
	return a
}

// errorInfo returns the ErrorInfo's reason and domain in the details'
// debug form.
func (w wireError) errorInfo() (info struct{ Reason, Domain string }) {
	for _, d := range w.Details {
		if d.Type == "google.rpc.ErrorInfo" {
			_ = json.Unmarshal(d.Debug, &info)
			break
		}
	}
	return info
}

// reason returns the ErrorInfo reason in the details' debug form.
func (w wireError) reason() string { return w.errorInfo().Reason }

// has reports whether the details include one of type typ.
func (w wireError) has(typ string) bool {
	for _, d := range w.Details {
		if d.Type == typ {
			return true
		}
	}
	return false
}

// TestConnectTimeoutIsTheCallersDeadline sends Connect-Timeout-Ms as curl
// would, to a handler that would run 5 s: the answer is 504
// deadline_exceeded with KERNEL_TIMEOUT_001, by the deadline.
func TestConnectTimeoutIsTheCallersDeadline(t *testing.T) {
	s := newServer(t)
	hc := httpClient(t, false)
	start := time.Now()
	a := post(t, hc, s.url+"/test.v1.Work/Run", `{"delayMs":5000}`, map[string]string{"Connect-Timeout-Ms": "200"})
	took := time.Since(start)
	if a.status != http.StatusGatewayTimeout || a.err.Code != "deadline_exceeded" || a.err.reason() != "KERNEL_TIMEOUT_001" {
		t.Fatalf("answer %d %s, want 504 deadline_exceeded KERNEL_TIMEOUT_001", a.status, a.body)
	}
	if took < 200*time.Millisecond || took > 4*time.Second {
		t.Errorf("answered after %v, want at the 200 ms deadline (and well before the handler's 5 s)", took)
	}
	r := waitLog(t, s, "connect call", "code=KERNEL_TIMEOUT_001")
	if r.Attrs["method"] != "/test.v1.Work/Run" {
		t.Errorf("log record %v", r.Attrs)
	}
}

// TestMalformedTimeoutIsRefused: a timeout that is not 1 to 10 digits is
// refused by connect-go before any operation runs.
func TestMalformedTimeoutIsRefused(t *testing.T) {
	s := newServer(t)
	a := post(t, httpClient(t, false), s.url+"/test.v1.Work/Run", `{}`, map[string]string{"Connect-Timeout-Ms": "soon"})
	if a.status != http.StatusBadRequest || a.err.Code != "invalid_argument" {
		t.Fatalf("answer %d %s, want 400 invalid_argument", a.status, a.body)
	}
}

// TestValidationDetails: a constraint failure carries BadRequest with the
// field, an unknown JSON field is KERNEL_VALIDATION_003, and a body that
// is not JSON is a validation outcome, each observed by the kernel.
func TestValidationDetails(t *testing.T) {
	s := newServer(t)
	hc := httpClient(t, false)
	a := post(t, hc, s.url+"/test.v1.Users/Signup", `{"email":"nope","age":20}`, nil)
	if a.status != http.StatusBadRequest || a.err.Code != "invalid_argument" || a.err.reason() != "KERNEL_VALIDATION_007" ||
		!a.err.has("google.rpc.BadRequest") || !strings.Contains(a.body, `"field":"email"`) {
		t.Fatalf("constraint: %d %s", a.status, a.body)
	}
	a = post(t, hc, s.url+"/test.v1.Users/Signup", `{"email":"a@b.example","age":20,"admin":true}`, nil)
	if a.status != http.StatusBadRequest || a.err.reason() != "KERNEL_VALIDATION_003" || !strings.Contains(a.err.Message, "admin") {
		t.Fatalf("unknown field: %d %s", a.status, a.body)
	}
	a = post(t, hc, s.url+"/test.v1.Users/Signup", `{"email":`, nil)
	if a.status != http.StatusBadRequest || a.err.reason() != "KERNEL_VALIDATION_001" {
		t.Fatalf("bad JSON: %d %s", a.status, a.body)
	}
	waitLog(t, s, "connect call", "code=KERNEL_VALIDATION_001")
	if a = post(t, hc, s.url+"/test.v1.Users/Signup", `{"email":"a@b.example","age":20}`, nil); a.status != http.StatusOK {
		t.Fatalf("valid: %d %s", a.status, a.body)
	}
}

// TestUnexpectedCarriesNoInternalText: a handler's plain error is
// internal with KERNEL_UNEXPECTED_001 and none of its text.
func TestUnexpectedCarriesNoInternalText(t *testing.T) {
	s := newServer(t)
	a := post(t, httpClient(t, false), s.url+"/test.v1.Work/Fail", `{"kind":"PLAIN"}`, nil)
	if a.status != http.StatusInternalServerError || a.err.Code != "internal" || a.err.reason() != "KERNEL_UNEXPECTED_001" ||
		strings.Contains(a.body, "10.0.0.7") {
		t.Fatalf("answer %d %s", a.status, a.body)
	}
}

// TestRateLimitAnswersUnavailableWithRetry: the second call within the
// window is unavailable with KERNEL_UNAVAILABLE_002 and a RetryInfo.
func TestRateLimitAnswersUnavailableWithRetry(t *testing.T) {
	s := newServer(t)
	hc := httpClient(t, true)
	if a := post(t, hc, s.url+"/test.v1.Work/Limited", `{}`, nil); a.status != http.StatusOK {
		t.Fatalf("first call: %d %s", a.status, a.body)
	}
	a := post(t, hc, s.url+"/test.v1.Work/Limited", `{}`, nil)
	if a.status != http.StatusServiceUnavailable || a.err.Code != "unavailable" || a.err.reason() != "KERNEL_UNAVAILABLE_002" ||
		!a.err.has("google.rpc.RetryInfo") {
		t.Fatalf("second call: %d %s", a.status, a.body)
	}
	if a.header.Get("RateLimit-Policy") == "" {
		t.Errorf("no RateLimit-Policy header: %v", a.header)
	}
}

// TestConnectGetForSideEffectFreeOperations: an operation mounted with GET
// answers Connect GET; any other refuses it.
func TestConnectGetForSideEffectFreeOperations(t *testing.T) {
	s := newServer(t)
	hc := httpClient(t, false)
	q := url.Values{"connect": {"v1"}, "encoding": {"json"}, "message": {`{"id":"42"}`}}
	req, _ := http.NewRequest(http.MethodGet, s.url+"/test.v1.Items/Get?"+q.Encode(), nil)
	a := do(t, hc, req)
	if a.status != http.StatusOK || !strings.Contains(a.body, `"name":"item 42"`) {
		t.Fatalf("GET: %d %s", a.status, a.body)
	}
	q.Set("message", base64.RawURLEncoding.EncodeToString([]byte(`{}`)))
	q.Set("base64", "1")
	req, _ = http.NewRequest(http.MethodGet, s.url+"/test.v1.Work/Run?"+q.Encode(), nil)
	if a = do(t, hc, req); a.status != http.StatusMethodNotAllowed {
		t.Fatalf("GET of a POST operation: %d %s, want 405", a.status, a.body)
	}
	// The REST route of the same operation is on the same port.
	res, err := hc.Get(s.url + "/items/7")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || !strings.Contains(string(b), "item 7") {
		t.Fatalf("REST GET /items/7: %d %s", res.StatusCode, b)
	}
}

// TestCORSPreflightNeverTouchesLimits: with WithCORS, preflights (their
// header list sorted, as browsers send it) from an
// allowed origin are answered without an operation: many of them leave
// work.limited's one call per window unspent. A foreign origin gets no
// CORS headers. Without WithCORS, no CORS headers at all.
func TestCORSPreflightNeverTouchesLimits(t *testing.T) {
	s := newServer(t, connectadapter.WithCORS("http://app.example"))
	hc := httpClient(t, false)
	for range 5 {
		req, _ := http.NewRequest(http.MethodOptions, s.url+"/test.v1.Work/Limited", nil)
		req.Header.Set("Origin", "http://app.example")
		req.Header.Set("Access-Control-Request-Method", "POST")
		req.Header.Set("Access-Control-Request-Headers", "connect-protocol-version,connect-timeout-ms,content-type,idempotency-key")
		a := do(t, hc, req)
		if a.status != http.StatusNoContent || a.header.Get("Access-Control-Allow-Origin") != "http://app.example" {
			t.Fatalf("preflight: %d %v", a.status, a.header)
		}
	}
	a := post(t, hc, s.url+"/test.v1.Work/Limited", `{}`, map[string]string{"Origin": "http://app.example"})
	if a.status != http.StatusOK {
		t.Fatalf("call after 5 preflights: %d %s, want 200: a preflight spent the rate limit", a.status, a.body)
	}
	if a.header.Get("Access-Control-Allow-Origin") != "http://app.example" ||
		!strings.Contains(a.header.Get("Access-Control-Expose-Headers"), "Sundial-Trace-Id") {
		t.Errorf("CORS headers of the call: %v", a.header)
	}
	a = post(t, hc, s.url+"/test.v1.Work/Run", `{}`, map[string]string{"Origin": "http://evil.example"})
	if a.header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("foreign origin allowed: %v", a.header)
	}

	// Off by default, and with no origin named (rs/cors alone would
	// read an empty list as every origin).
	for _, off := range []*server{newServer(t), newServer(t, connectadapter.WithCORS())} {
		a = post(t, hc, off.url+"/test.v1.Work/Run", `{}`, map[string]string{"Origin": "http://app.example"})
		if a.status != http.StatusOK || a.header.Get("Access-Control-Allow-Origin") != "" {
			t.Errorf("CORS off: %d %v", a.status, a.header)
		}
	}
}

// TestDecompressionBombIsRefused: 1 KiB of gzip that inflates to 64 MiB,
// past a 1 MiB bound, is refused with resource_exhausted (HTTP 429). The
// reader stops one byte past the bound: the heap does not grow by the
// inflated size, and the operation never runs.
func TestDecompressionBombIsRefused(t *testing.T) {
	s := newServer(t, connectadapter.WithReadLimit(1<<20))
	// One gzip member of 1 MiB of spaces is about 1 KiB; a gzip stream may
	// hold many members, read one after another.
	var member bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&member, gzip.BestCompression)
	_, _ = zw.Write(bytes.Repeat([]byte{' '}, 1<<20))
	_ = zw.Close()
	var zbuf bytes.Buffer
	for range 64 {
		zbuf.Write(member.Bytes())
	}
	if zbuf.Len() > 100<<10 {
		t.Fatalf("bomb is %d bytes", zbuf.Len())
	}
	hc := httpClient(t, false)
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range 4 {
		req, _ := http.NewRequest(http.MethodPost, s.url+"/test.v1.Work/Run", bytes.NewReader(zbuf.Bytes()))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Content-Encoding", "gzip")
		a := do(t, hc, req)
		if a.status != http.StatusTooManyRequests || a.err.Code != "resource_exhausted" {
			t.Fatalf("bomb: %d %s, want 429 resource_exhausted", a.status, a.body)
		}
	}
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	// 4 bombs fully inflated would allocate 256 MiB; bounded, a few MiB.
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<20 {
		t.Errorf("allocated %d MiB for 4 bombs, want the bound's few", grew>>20)
	}
	for _, r := range s.logs.Records() {
		if r.Message == "connect call" {
			t.Errorf("an operation was invoked: %v", r.Attrs)
		}
	}
	// A compressed message within the bound is served.
	zbuf.Reset()
	zw.Reset(&zbuf)
	_, _ = zw.Write([]byte(`{"delayMs":1}`))
	_ = zw.Close()
	req, _ := http.NewRequest(http.MethodPost, s.url+"/test.v1.Work/Run", &zbuf)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Content-Encoding", "gzip")
	if a := do(t, hc, req); a.status != http.StatusOK {
		t.Fatalf("small gzip: %d %s", a.status, a.body)
	}
}

// endless is a request body that never ends.
type endless struct{}

func (endless) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// TestEndlessBodyIsAnswered: a body that never ends, over HTTP/1.1 and
// h2c, is answered resource_exhausted once the bound is read; the
// server does not read on to its end.
func TestEndlessBodyIsAnswered(t *testing.T) {
	s := newServer(t, connectadapter.WithReadLimit(64<<10))
	for _, h2c := range []bool{false, true} {
		hc := httpClient(t, h2c)
		// Without the bound the server reads on for ever: the client gives
		// up after 20 s.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.url+"/test.v1.Work/Run", io.NopCloser(endless{}))
		req.Header.Set("Content-Type", "application/proto")
		res, err := hc.Do(req)
		if err != nil {
			t.Fatalf("h2c=%v: %v", h2c, err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("h2c=%v: status %d, want 429 resource_exhausted", h2c, res.StatusCode)
		}
	}
}

// TestUnknownMethodIsObserved: a method a served service lacks is
// unimplemented (HTTP 501), answered through the kernel: one log record
// with GRPC_NOT_FOUND_001 and the method.
func TestUnknownMethodIsObserved(t *testing.T) {
	s := newServer(t)
	a := post(t, httpClient(t, false), s.url+"/test.v1.Work/Nope", `{}`, nil)
	if a.status != http.StatusNotImplemented || a.err.Code != "unimplemented" || !strings.Contains(a.err.Message, "/test.v1.Work/Nope") {
		t.Fatalf("answer %d %s, want 501 unimplemented", a.status, a.body)
	}
	waitLog(t, s, "connect call", "method=/test.v1.Work/Nope", "code=GRPC_NOT_FOUND_001")
}

// TestUnknownPathThroughNew: New's handler answers a call of a path
// outside every served service as unimplemented, in the call's
// protocol: 404 for a unary Connect call, grpc-status 12 for gRPC. It is
// observed like an unknown method. Any other request is a plain 404.
func TestUnknownPathThroughNew(t *testing.T) {
	s := newServer(t)
	h, err := connectadapter.New(s.k, connectadapter.WithPackage("test.v1"),
		connectadapter.WithLogger(s.logs.Logger()))
	if err != nil {
		t.Fatal(err)
	}
	url := serve(t, h, nil)
	a := post(t, httpClient(t, false), url+"/other.v1.Nope/Call", `{}`, nil)
	if a.status != http.StatusNotFound || a.err.Code != "unimplemented" {
		t.Errorf("Connect: %d %s, want 404 unimplemented", a.status, a.body)
	}
	req, _ := http.NewRequest(http.MethodPost, url+"/other.v1.Nope/Call", strings.NewReader("\x00\x00\x00\x00\x00"))
	req.Header.Set("Content-Type", "application/grpc")
	res, err := httpClient(t, true).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	_ = res.Body.Close()
	if got := res.Header.Get("Grpc-Status") + res.Trailer.Get("Grpc-Status"); res.StatusCode != http.StatusOK || got != "12" {
		t.Errorf("gRPC: %d, grpc-status %q; want 200, 12 (unimplemented)", res.StatusCode, got)
	}
	req, _ = http.NewRequest(http.MethodGet, url+"/favicon.ico", nil)
	if p := do(t, httpClient(t, false), req); p.status != http.StatusNotFound || strings.Contains(p.body, "unimplemented") {
		t.Errorf("a plain request: %d %s, want a plain 404", p.status, p.body)
	}
	waitLog(t, s, "connect call", "method=/other.v1.Nope/Call", "code=GRPC_NOT_FOUND_001")
}
