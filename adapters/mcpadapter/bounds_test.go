package mcpadapter_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sundial-go/sundial/adapters/mcpadapter"
)

// TestBoundedSessions: a request that would open a session beyond
// MaxSessions gets 503 with Retry-After, and the client's Connect fails;
// the sessions already open are served. After Shutdown, no session opens.
func TestBoundedSessions(t *testing.T) {
	k := newKernel(t, newProbe(), nil)
	url, m := serve(t, k, &mcpadapter.Options{MaxSessions: 1})
	first := connectHTTP(t, url)
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	if cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: url + "/mcp", HTTPClient: hc, MaxRetries: -1}, nil); err == nil {
		cs.Close()
		t.Fatal("a second session opened beyond MaxSessions 1")
	}
	resp, err := hc.Post(url+"/mcp", "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" ||
		!strings.Contains(string(body), `"error"`) {
		t.Errorf("beyond MaxSessions: %d %q %s, want 503 with Retry-After 1 and a JSON-RPC error", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	if a := mcpCall(context.Background(), t, first, "orders.limited", map[string]any{}, nil); a.refused {
		t.Errorf("the open session: %+v, want it served", a)
	}
	if err := m.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	resp, err = hc.Post(url+"/mcp", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("after Shutdown: %d, want 503", resp.StatusCode)
	}
}

// TestBoundedPending: a tool call while MaxPending calls are in progress
// is refused at once, UNAVAILABLE MCP_UNAVAILABLE_001 with a retry-after
// of 1 second, and nothing runs.
func TestBoundedPending(t *testing.T) {
	p := newProbe()
	k := newKernel(t, p, nil)
	url, _ := serve(t, k, &mcpadapter.Options{MaxPending: 1})
	cs := connectHTTP(t, url)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "orders.wait", Arguments: map[string]any{}})
		errc <- err
	}()
	wait(t, p.started, "the first call to start")
	a := mcpCall(context.Background(), t, cs, "orders.create", map[string]any{"name": "pen", "amount": 2, "currency": "EUR"}, nil)
	if a.code != "MCP_UNAVAILABLE_001" || a.status != 503 || a.retryAfter != float64(1) {
		t.Errorf("second call: %+v, want 503 MCP_UNAVAILABLE_001 retryAfter 1", a)
	}
	cancel()
	wait(t, errc, "the first call to end")
	wait(t, p.ended, "the handler to end")
}

// TestBoundedMessages: a message over MaxMessageBytes is refused before
// it is decoded: 413 over HTTP; over stdio the session ends. The handler
// never runs.
func TestBoundedMessages(t *testing.T) {
	k := newKernel(t, newProbe(), nil)
	url, m := serve(t, k, &mcpadapter.Options{MaxMessageBytes: 4096})
	big := map[string]any{"name": strings.Repeat("x", 8192), "amount": 2, "currency": "EUR"}
	cs := connectHTTP(t, url)
	if _, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "orders.create", Arguments: big}); err == nil {
		t.Error("an 8 KiB call over HTTP with MaxMessageBytes 4096: no error")
	}
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	req, _ := http.NewRequest(http.MethodPost, url+"/mcp", strings.NewReader(
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"x":"`+strings.Repeat("x", 8192)+`"}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("an 8 KiB body: %d, want 413", resp.StatusCode)
	}
	sc := connectStdio(t, m)
	if _, err := sc.CallTool(context.Background(), &mcp.CallToolParams{Name: "orders.create", Arguments: big}); err == nil {
		t.Error("an 8 KiB line over stdio with MaxMessageBytes 4096: no error")
	}
}

// TestIdleSessionsClosed: a session that sends nothing for SessionIdle is
// closed; its next call fails as a missing session.
func TestIdleSessionsClosed(t *testing.T) {
	k := newKernel(t, newProbe(), nil)
	url, _ := serve(t, k, &mcpadapter.Options{SessionIdle: 50 * time.Millisecond})
	cs := connectHTTP(t, url)
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := cs.ListTools(context.Background(), nil)
		if errors.Is(err, mcp.ErrSessionMissing) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the idle session still answers after 10 s (last error %v)", err)
		}
		time.Sleep(100 * time.Millisecond) // idle longer than SessionIdle
	}
}

// TestShutdownWaitsForCalls: Shutdown lets a tool call in progress finish
// (its own deadline ends it: TIMEOUT, not CANCELLED), then returns. With
// a ctx that ends first, it closes the session, which cancels the call,
// and returns ctx's error.
func TestShutdownWaitsForCalls(t *testing.T) {
	for _, graceful := range []bool{true, false} {
		p := newProbe()
		k := newKernel(t, p, nil)
		url, m := serve(t, k, nil)
		cs := connectHTTP(t, url)
		res := startWait(t, cs, k, p, 300, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if !graceful {
			cancel()
		}
		err := m.Shutdown(ctx)
		cancel()
		ended := wait(t, p.ended, "the handler to end")
		if graceful && (err != nil || !errors.Is(ended, context.DeadlineExceeded)) {
			t.Errorf("graceful: Shutdown %v, handler ended with %v; want nil and its own deadline", err, ended)
		}
		if !graceful && (!errors.Is(err, context.Canceled) || !errors.Is(ended, context.Canceled)) {
			t.Errorf("ctx ended: Shutdown %v, handler ended with %v; want both cancelled", err, ended)
		}
		a := wait(t, res, "the call's answer")
		if graceful && a.code != "KERNEL_TIMEOUT_001" {
			t.Errorf("graceful: the call answered %+v, want its TIMEOUT", a)
		}
	}
}

// TestShutdownWaitsForTheAnswer: Shutdown returns only once a call's
// answer is written, not when its handler returns, over Streamable HTTP
// and over stdio. Between the two, the adapter logs the call (held here);
// a Shutdown that closed the session then lost the answer ("request
// terminated without response").
func TestShutdownWaitsForTheAnswer(t *testing.T) {
	for _, transport := range []string{"streamable HTTP", "stdio"} {
		t.Run(transport, func(t *testing.T) { shutdownWaitsForTheAnswer(t, transport) })
	}
}

func shutdownWaitsForTheAnswer(t *testing.T, transport string) {
	p := newProbe()
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	k := newKernel(t, p, gatedWriter(func(b []byte) {
		if bytes.Contains(b, []byte(`"msg":"mcp call"`)) {
			once.Do(func() { close(held) })
			<-release
		}
	}))
	url, m := serve(t, k, nil)
	cs := connectHTTP(t, url)
	if transport == "stdio" {
		cs = connectStdio(t, m)
	}
	res := make(chan answer, 1)
	go func() {
		res <- mcpCall(context.Background(), t, cs, "orders.wait", map[string]any{}, mcp.Meta{"sundial/timeoutMs": 100})
	}()
	// Whether its handler ran or its deadline passed first (then the
	// kernel answers without running it), the call is logged before its
	// answer is written.
	wait(t, held, "the call to be logged")
	shutdownAfterRelease(t, m, release)
	if a := wait(t, res, "the call's answer"); a.code != "KERNEL_TIMEOUT_001" {
		t.Errorf("the call answered %+v, want its TIMEOUT", a)
	}
}

// shutdownAfterRelease shuts m down while a call's answer is held, and
// checks that Shutdown returns only after release, without an error.
func shutdownAfterRelease(t *testing.T, m *mcpadapter.Server, release chan struct{}) {
	t.Helper()
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		shut <- m.Shutdown(ctx)
	}()
	select {
	case err := <-shut:
		close(release)
		t.Fatalf("Shutdown returned (%v) before the call's answer was written", err)
	case <-time.After(100 * time.Millisecond): // only a wrong Shutdown returns here
	}
	close(release)
	if err := <-shut; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}

// gatedWriter is an io.Writer that calls itself with every write first.
type gatedWriter func([]byte)

func (g gatedWriter) Write(b []byte) (int, error) {
	g(b)
	return len(b), nil
}

// TestSessionCapIsAtomic: many initialize requests at once, each in
// progress before any has initialized, open exactly MaxSessions sessions;
// the others get 503 with Retry-After.
func TestSessionCapIsAtomic(t *testing.T) {
	sessionCapHolds(t, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":`+
		`"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
}

// TestSessionCapReadsMethodAsTheSDK: an initialize whose body also holds a
// key that differs from "method" only in case takes a place too. The SDK
// matches keys by case; a case-blind read took it for another request.
func TestSessionCapReadsMethodAsTheSDK(t *testing.T) {
	sessionCapHolds(t, `{"jsonrpc":"2.0","id":1,"method":"initialize","Method":"ping","params":`+
		`{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
}

// sessionCapHolds sends initialize, the body of an initialize request, on
// many requests at once, each in progress before any has initialized.
// Exactly MaxSessions open sessions; the others get 503 with Retry-After.
func sessionCapHolds(t *testing.T, initialize string) {
	t.Helper()
	const (
		limit = 3
		tries = 12
	)
	k := newKernel(t, newProbe(), nil)
	m, err := mcpadapter.New(k, &mcpadapter.Options{MaxSessions: limit})
	if err != nil {
		t.Fatal(err)
	}
	past := make(chan struct{}, tries)
	srv := bodyWatched(m, past)
	defer srv.Close()
	defer m.Shutdown(context.Background())
	hc := srv.Client()
	bodies := make([]*io.PipeWriter, tries)
	type result struct {
		status              int
		session, retryAfter string
	}
	results := make(chan result, tries)
	for i := range tries {
		pr, pw := io.Pipe()
		bodies[i] = pw
		req, _ := http.NewRequest(http.MethodPost, srv.URL, pr)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		go func() {
			resp, err := hc.Do(req)
			if err != nil {
				results <- result{}
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			results <- result{resp.StatusCode, resp.Header.Get("Mcp-Session-Id"), resp.Header.Get("Retry-After")}
		}()
	}
	for range tries {
		wait(t, past, "a request's body to be read")
	}
	for _, pw := range bodies {
		go func() { _, _ = io.WriteString(pw, initialize); pw.Close() }()
	}
	opened, refused := 0, 0
	for range tries {
		switch r := wait(t, results, "an answer"); {
		case r.status == http.StatusOK && r.session != "":
			opened++
		case r.status == http.StatusServiceUnavailable && r.retryAfter == "1":
			refused++
		default:
			t.Errorf("answer %d, session %q: want 200 with a session or 503", r.status, r.session)
		}
	}
	if opened != limit || refused != tries-limit {
		t.Errorf("%d sessions opened, %d refused; want %d and %d", opened, refused, limit, tries-limit)
	}
}

// bodyWatched serves m; past receives once for each request, when its
// body is first read or it was answered.
func bodyWatched(m *mcpadapter.Server, past chan<- struct{}) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var once sync.Once
		mark := func() {
			once.Do(func() {
				select {
				case past <- struct{}{}:
				default: // past is full: a later request of the test's
				}
			})
		}
		r.Body = &onRead{ReadCloser: r.Body, first: mark}
		defer mark()
		m.ServeHTTP(w, r)
	}))
}

// TestSessionPlaceOnlyForInitialize: a request without a session ID holds
// no place under MaxSessions while its body is read, nor while a
// request other than initialize is served. With MaxSessions 1, a client
// connects (its server/discover probe first) beside a slow initialize;
// the slow one then gets 503.
func TestSessionPlaceOnlyForInitialize(t *testing.T) {
	k := newKernel(t, newProbe(), nil)
	m, err := mcpadapter.New(k, &mcpadapter.Options{MaxSessions: 1})
	if err != nil {
		t.Fatal(err)
	}
	past := make(chan struct{}, 1)
	srv := bodyWatched(m, past)
	defer srv.Close()
	defer m.Shutdown(context.Background())
	pr, pw := io.Pipe()
	defer pw.Close() // before srv.Close, which waits for the request
	req, _ := http.NewRequest(http.MethodPost, srv.URL, pr)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	slow := make(chan *http.Response, 1)
	go func() {
		resp, err := srv.Client().Do(req)
		if err != nil {
			resp = &http.Response{Body: http.NoBody}
		}
		slow <- resp
	}()
	wait(t, past, "the slow request's body to be read")
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: srv.URL, HTTPClient: hc}, nil)
	if err != nil {
		t.Fatalf("a client beside a request whose body is being read: %v", err)
	}
	defer cs.Close()
	_, _ = io.WriteString(pw, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":`+
		`"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	pw.Close()
	resp := wait(t, slow, "the slow initialize's answer")
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" {
		t.Errorf("the slow initialize beyond MaxSessions 1: %d, want 503 with Retry-After 1", resp.StatusCode)
	}
}

// onRead calls first before the first Read of its body.
type onRead struct {
	io.ReadCloser
	first func()
}

func (o *onRead) Read(p []byte) (int, error) {
	o.first()
	return o.ReadCloser.Read(p)
}

// TestStdioAnswersAreAllPaid: once a stdio session's requests are
// answered, it owes nothing: Shutdown returns no error, without waiting
// out its context. Requests, answers and notifications of any kind keep
// the count even.
func TestStdioAnswersAreAllPaid(t *testing.T) {
	k := newKernel(t, newProbe(), nil)
	_, m := serve(t, k, nil)
	cs := connectStdio(t, m)
	ctx := t.Context()
	if _, err := cs.ListTools(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if err := cs.Ping(ctx, nil); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if a := mcpCall(ctx, t, cs, "orders.create", map[string]any{"name": "a", "amount": 1}, nil); a.rpcError {
			t.Fatalf("the call got no answer of the operation: %+v", a)
		}
	}
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "no.such.tool"}); err == nil {
		t.Fatal("a call of no tool: no error")
	}
	// The client reads an answer before the writer has counted it paid:
	// Shutdown may wait that moment, never more.
	done, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.Shutdown(done); err != nil {
		t.Fatalf("Shutdown after every answer was written: %v", err)
	}
}
