package httpadapter_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sundial-go/sundial/adapters/httpadapter"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/kernel/propagation"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
)

// Test operations. Each test builds its own app, so counters never leak
// between tests.

type item struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	Qty  int    `json:"qty"`
}

type createItem struct {
	Name string `json:"name"`
	Qty  int    `json:"qty"`
	Tags []struct {
		Label string `json:"label"`
	} `json:"tags"`
}

func (c *createItem) Validate() error {
	if c.Name == "" {
		return pipeline.NewError(pipeline.KindValidation, "TEST_VALIDATION_001", "name must not be empty").WithDetail("field", "name")
	}
	return nil
}

type getItem struct {
	ID      int  `param:"id" json:"id"`
	Verbose bool `json:"verbose"`
	Limit   *int `query:"limit" json:"-"`
}

type work struct {
	DelayMs   int  `json:"delayMs"`
	IgnoreCtx bool `json:"ignoreCtx"`
	Tag       int  `json:"tag"` // names the call in testApp.ran
}

type done struct {
	Rows int `json:"rows"`
}

type typedNilIn struct {
	Pipeline bool `json:"pipeline"` // a typed-nil *pipeline.Error rather than a foreign one
}

// brokenErr is an application error whose methods read their receiver:
// a typed nil of it panics in Error and Unwrap.
type brokenErr struct{ cause error }

func (e *brokenErr) Error() string { return "broken: " + e.cause.Error() }
func (e *brokenErr) Unwrap() error { return e.cause }

// typedNil returns a nil *brokenErr as a non-nil error.
func typedNil() error {
	var e *brokenErr
	return e
}

// testApp records what its handlers saw.
type testApp struct {
	calls       atomic.Int64   // handler entries, all operations
	started     chan struct{}  // work.run: one send per entry (buffered)
	ctxDone     chan time.Time // work.run: when its context ended
	release     chan struct{}  // work.run with ignoreCtx: closed to let it return
	flaky       atomic.Int64   // work.flaky: calls so far
	ran         sync.Map       // work.run: the tag of each call whose handler ran
	releaseOnce sync.Once

	mu         sync.Mutex // guards the fields below
	lastGet    getItem
	baggage    map[string]string
	idemKey    string      // work.baggage: the invocation's idempotency key
	ctxIdemKey string      // work.baggage: the key in its context's baggage
	deadlines  []time.Time // work.run: ctx deadlines seen
}

// unblock lets every work.run call that ignores its context return.
func (app *testApp) unblock() { app.releaseOnce.Do(func() { close(app.release) }) }

func newTestApp() *testApp {
	return &testApp{
		started: make(chan struct{}, 16),
		ctxDone: make(chan time.Time, 16),
		release: make(chan struct{}),
	}
}

func (app *testApp) register(t *testing.T) *operations.Registry {
	t.Helper()
	reg := operations.NewRegistry()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(operations.Register(reg, operations.Descriptor{ID: "items.create", Method: "POST", Path: "/items"},
		func(ctx context.Context, in createItem) (item, error) {
			app.calls.Add(1)
			return item{ID: "it-1", Name: in.Name, Qty: in.Qty}, nil
		}))
	must(operations.Register(reg, operations.Descriptor{ID: "items.get", Method: "GET", Path: "/items/:id"},
		func(ctx context.Context, in getItem) (item, error) {
			app.calls.Add(1)
			app.mu.Lock()
			app.lastGet = in
			app.mu.Unlock()
			if in.ID == 404 {
				return item{}, pipeline.NewError(pipeline.KindNotFound, "TEST_NOT_FOUND_001", "no such item").WithDetail("id", in.ID)
			}
			return item{ID: "it-1"}, nil
		}))
	must(operations.Register(reg, operations.Descriptor{ID: "items.delete", Method: "DELETE", Path: "/items/:id"},
		func(ctx context.Context, in getItem) (struct{}, error) {
			app.calls.Add(1)
			return struct{}{}, nil
		}))
	must(operations.Register(reg, operations.Descriptor{ID: "work.run", Method: "POST", Path: "/work"},
		func(ctx context.Context, in work) (done, error) {
			app.calls.Add(1)
			app.ran.Store(in.Tag, true)
			if d, ok := ctx.Deadline(); ok {
				app.mu.Lock()
				app.deadlines = append(app.deadlines, d)
				app.mu.Unlock()
			}
			go func() {
				<-ctx.Done()
				app.ctxDone <- time.Now()
			}()
			app.started <- struct{}{}
			if in.IgnoreCtx {
				<-app.release
				return done{Rows: 1}, nil
			}
			t := time.NewTimer(time.Duration(in.DelayMs) * time.Millisecond)
			defer t.Stop()
			select {
			case <-t.C:
				return done{Rows: 1}, nil
			case <-ctx.Done():
				return done{}, ctx.Err()
			}
		}))
	must(operations.Register(reg, operations.Descriptor{ID: "work.flaky", Method: "POST", Path: "/flaky"},
		func(ctx context.Context, in struct{}) (done, error) {
			app.calls.Add(1)
			if app.flaky.Add(1) <= 2 {
				return done{}, pipeline.NewError(pipeline.KindUnavailable, "TEST_UNAVAILABLE_001", "downstream is down")
			}
			return done{Rows: 3}, nil
		}))
	must(operations.Register(reg, operations.Descriptor{ID: "work.fail", Method: "POST", Path: "/fail"},
		func(ctx context.Context, in struct{}) (done, error) {
			app.calls.Add(1)
			return done{}, errors.New("db: password=hunter2 rejected")
		}))
	must(operations.Register(reg, operations.Descriptor{ID: "work.panic", Method: "POST", Path: "/panic"},
		func(ctx context.Context, in struct{}) (done, error) {
			app.calls.Add(1)
			panic("secret panic text")
		}))
	must(operations.Register(reg, operations.Descriptor{ID: "work.baggage", Method: "POST", Path: "/baggage"},
		func(ctx context.Context, in struct{}) (done, error) { return done{}, nil }))
	must(operations.Register(reg, operations.Descriptor{ID: "work.typednil", Method: "POST", Path: "/typednil"},
		func(ctx context.Context, in typedNilIn) (done, error) {
			app.calls.Add(1)
			if in.Pipeline {
				var e *pipeline.Error
				return done{}, e
			}
			return done{}, typedNil()
		}))
	must(operations.Register(reg, operations.Descriptor{ID: "work.internal"}, // no HTTP route
		func(ctx context.Context, in struct{}) (done, error) { return done{}, nil }))
	return reg
}

// baggageProbe records the invocation's baggage and idempotency key, and
// the key its handler's context carries (application middleware).
func (app *testApp) baggageProbe() pipeline.Middleware {
	return pipeline.MiddlewareFunc(func(ctx context.Context, inv *pipeline.Invocation, next pipeline.Handler) (any, error) {
		if inv.OperationID() == "work.baggage" {
			m := map[string]string{}
			inv.RangeBaggage(func(k, v string) bool { m[k] = v; return true })
			app.mu.Lock()
			app.baggage = m
			app.idemKey, app.ctxIdemKey = inv.IdempotencyKey(), propagation.IdempotencyKey(ctx)
			app.mu.Unlock()
		}
		return next(ctx, inv)
	})
}

const testConfig = `{"Sundial": {"Kernel": {"MaxTimeoutSeconds": 10, "Resilience": {"Operations": {
	"work.run":   {"ConcurrencyLimit": 1},
	"items.create": {"PermitLimit": 3, "WindowSeconds": 60}
}}}}}`

// logSink keeps the log records of a test.
type logSink struct{ *pipelinetest.LogSink }

func newLogSink() logSink { return logSink{new(pipelinetest.LogSink)} }

// records returns the records whose message is msg.
func (l logSink) records(msg string) []pipelinetest.Record { return l.Find(pipelinetest.Message(msg)) }

// waitRecord waits for a record with message msg whose attribute key
// equals want.
func (l logSink) waitRecord(t *testing.T, msg, key string, want any, within time.Duration) pipelinetest.Record {
	t.Helper()
	r, ok := l.WaitFor(within, func(r pipelinetest.Record) bool { return r.Message == msg && r.Attrs[key] == want })
	if !ok {
		t.Fatalf("no log record %q with %s=%v within %v; have %v", msg, key, want, within, l.records(msg))
	}
	return r
}

// server is a running test server on a real 127.0.0.1 listener.
type server struct {
	url     string
	logs    logSink
	k       *kernel.Kernel
	adapter *httpadapter.Adapter
	echo    *echo.Echo
	client  *http.Client
	http    *http.Server
}

type serverOpts struct {
	config  string
	kernel  []kernel.Option
	adapter []httpadapter.Option
	routes  func(e *echo.Echo, a *httpadapter.Adapter)
}

func startServer(t *testing.T, app *testApp, so serverOpts) *server {
	t.Helper()
	logs := newLogSink()
	logger := logs.Logger()
	cfg := so.config
	if cfg == "" {
		cfg = testConfig
	}
	kopts := append([]kernel.Option{
		kernel.WithRegistry(app.register(t)),
		kernel.WithConfigJSON([]byte(cfg)),
		kernel.WithLogger(logger),
		kernel.UseAt(pipeline.StageHandle, app.baggageProbe()),
	}, so.kernel...)
	k, err := kernel.New(kopts...)
	if err != nil {
		t.Fatal(err)
	}
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	a, err := httpadapter.Mount(e, k, append([]httpadapter.Option{httpadapter.WithLogger(logger)}, so.adapter...)...)
	if err != nil {
		t.Fatal(err)
	}
	if so.routes != nil {
		so.routes(e, a)
	}
	t.Cleanup(app.unblock) // runs before serveEcho's cleanup: stragglers return
	srv := serveEcho(t, e)
	srv.logs, srv.k, srv.adapter = logs, k, a
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := k.Wait(ctx); err != nil {
			t.Errorf("Kernel.Wait: %v", err)
		}
	})
	return srv
}

// serveEcho serves e on a real 127.0.0.1 listener until the test ends.
func serveEcho(t *testing.T, e *echo.Echo) *server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: e, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(ln)
	}()
	client := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		<-served
		client.CloseIdleConnections()
	})
	return &server{url: "http://" + ln.Addr().String(), echo: e, client: client, http: srv}
}

// response is a decoded response.
type response struct {
	status  int
	header  http.Header
	body    []byte
	problem map[string]any // decoded when Content-Type is problem+json
}

func (s *server) do(t *testing.T, method, path, body string, header map[string]string) response {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, s.url+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	return s.send(t, req)
}

func (s *server) send(t *testing.T, req *http.Request) response {
	t.Helper()
	resp, err := s.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL.Path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	r := response{status: resp.StatusCode, header: resp.Header, body: b}
	if resp.Header.Get("Content-Type") == httpadapter.ContentTypeProblem {
		if err := json.Unmarshal(b, &r.problem); err != nil {
			t.Fatalf("problem body %q: %v", b, err)
		}
	}
	return r
}

// problemMembers are the members every Problem Details body has, in order.
var problemMembers = []string{"type", "title", "status", "detail", "instance", "code", "traceId", "details"}

// checkProblem asserts the shape and the basic members of a problem.
func checkProblem(t *testing.T, r response, status int, kind, code, instance string) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status = %d, want %d; body %s", r.status, status, r.body)
	}
	if r.problem == nil {
		t.Fatalf("Content-Type = %q, want %s; body %s", r.header.Get("Content-Type"), httpadapter.ContentTypeProblem, r.body)
	}
	if len(r.problem) != len(problemMembers) {
		t.Errorf("problem has members %v, want exactly %v", keys(r.problem), problemMembers)
	}
	for _, m := range problemMembers {
		if _, ok := r.problem[m]; !ok {
			t.Errorf("problem lacks member %q: %s", m, r.body)
		}
	}
	want := map[string]any{
		"type": "urn:sundial:error:" + code, "title": kind, "status": float64(status),
		"instance": instance, "code": code,
	}
	for k, v := range want {
		if r.problem[k] != v {
			t.Errorf("problem[%q] = %v, want %v; body %s", k, r.problem[k], v, r.body)
		}
	}
}

func details(r response) map[string]any {
	d, _ := r.problem["details"].(map[string]any)
	return d
}

func keys(m map[string]any) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}
