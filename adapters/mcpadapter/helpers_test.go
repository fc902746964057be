package mcpadapter_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sundial-go/sundial/adapters/httpadapter"
	"github.com/sundial-go/sundial/adapters/mcpadapter"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
)

type orderIn struct {
	Name     string `json:"name" validate:"required,max=10"`
	Amount   int    `json:"amount" validate:"min=1,max=100"`
	Currency string `json:"currency" validate:"oneof=EUR USD"`
}

type order struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	Amount int    `json:"amount"`
}

type done struct {
	OK bool `json:"ok"`
}

// probe records what the blocking handler saw.
type probe struct {
	started chan struct{}
	ended   chan error // the handler context's error when it ended
	bag     chan string
	sendErr chan error // the error of orders.gush's last Send
}

func newProbe() *probe {
	return &probe{started: make(chan struct{}, 8), ended: make(chan error, 8), bag: make(chan string, 8),
		sendErr: make(chan error, 8)}
}

// testConfig: orders.limited admits one call a minute; orders.slow has a
// deadline of its own, 50 ms; orders.pay requires idempotency keys;
// orders.fail's breaker opens after two failures; orders.wait runs one
// call at a time. The streams: orders.ration admits one a minute;
// orders.gush's send stall is 0.3 s; orders.hush's idle clock 1 s.
const testConfig = `{"Sundial":{"Kernel":{"Resilience":{"Operations":{
	"orders.limited":{"PermitLimit":1,"WindowSeconds":60},
	"orders.slow":{"TimeoutSeconds":0.05},
	"orders.pay":{"Idempotency":{"Required":true}},
	"orders.fail":{"FailureThreshold":2,"BreakSeconds":60},
	"orders.wait":{"ConcurrencyLimit":1},
	"orders.ration":{"PermitLimit":1,"WindowSeconds":60},
	"orders.gush":{"Stream":{"SendStallSeconds":0.3}},
	"orders.hush":{"Stream":{"IdleSeconds":1}}}}}}}`

// newKernel returns a kernel of the test operations, logging JSON to log.
func newKernel(t testing.TB, p *probe, log io.Writer) *kernel.Kernel {
	t.Helper()
	reg := operations.NewRegistry()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(operations.Register(reg, operations.Descriptor{ID: "orders.create", Summary: "Create an order.",
		Method: "POST", Path: "/orders"},
		func(_ context.Context, in orderIn) (order, error) {
			return order{ID: "ord-1", Name: in.Name, Amount: in.Amount}, nil
		}))
	must(operations.Register(reg, operations.Descriptor{ID: "orders.limited", Summary: "A call a minute.",
		Method: "POST", Path: "/limited"},
		func(context.Context, struct{}) (done, error) { return done{OK: true}, nil }))
	block := func(ctx context.Context, _ struct{}) (done, error) {
		p.bag <- bagMember(ctx, "tenant")
		p.started <- struct{}{}
		<-ctx.Done()
		p.ended <- ctx.Err()
		return done{}, ctx.Err()
	}
	must(operations.Register(reg, operations.Descriptor{ID: "orders.wait", Summary: "Wait until the context ends.",
		Method: "POST", Path: "/wait"}, block))
	must(operations.Register(reg, operations.Descriptor{ID: "orders.slow", Summary: "Wait past its own deadline.",
		Method: "POST", Path: "/slow"}, block))
	registerStreams(t, reg, p)
	must(operations.Register(reg, operations.Descriptor{ID: "orders.fail", Summary: "Fail unexpectedly.",
		Method: "POST", Path: "/fail"},
		func(context.Context, struct{}) (done, error) { return done{}, errors.New("the disk is full") }))
	var paid atomic.Int64
	must(operations.Register(reg, operations.Descriptor{ID: "orders.pay", Summary: "Pay; each run counts.",
		Method: "POST", Path: "/pay"},
		func(context.Context, struct{}) (order, error) {
			return order{ID: "pay-" + strconv.FormatInt(paid.Add(1), 10)}, nil
		}))
	if log == nil {
		log = io.Discard
	}
	k, err := kernel.New(kernel.WithRegistry(reg), kernel.WithConfigJSON([]byte(testConfig)),
		kernel.WithLogger(slog.New(slog.NewJSONHandler(log, nil))))
	must(err)
	t.Cleanup(func() {
		if err := k.Wait(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return k
}

// serve mounts the HTTP adapter and the MCP server (at /mcp) on one echo
// instance, serves it on 127.0.0.1 until the test ends, and returns its
// URL.
func serve(t testing.TB, k *kernel.Kernel, o *mcpadapter.Options) (string, *mcpadapter.Server) {
	t.Helper()
	e := echo.New()
	if _, err := httpadapter.Mount(e, k); err != nil {
		t.Fatal(err)
	}
	m, err := mcpadapter.New(k, o)
	if err != nil {
		t.Fatal(err)
	}
	e.Any("/mcp", echo.WrapHandler(m))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: e}
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := m.Shutdown(ctx); err != nil {
			t.Error(err)
		}
		srv.Close()
		<-served
	})
	return "http://" + ln.Addr().String(), m
}

// connectHTTP connects the SDK's client to the MCP endpoint at url.
func connectHTTP(t testing.TB, url string, opts ...*mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{}}
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, clientOptions(opts))
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: url + "/mcp", HTTPClient: hc}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.Close()
		hc.CloseIdleConnections()
	})
	return cs
}

// connectStdio serves m over a pair of pipes, as over a process's
// standard input and output, and connects the SDK's client to it.
func connectStdio(t *testing.T, m *mcpadapter.Server, opts ...*mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		_ = m.ServeStdio(ctx, inR, outW)
		outW.Close()
	})
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, clientOptions(opts))
	cs, err := c.Connect(ctx, &mcp.IOTransport{Reader: outR, Writer: inW}, nil)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.Close()
		cancel()
		inR.Close()
		wg.Wait()
	})
	return cs
}

// clientOptions returns the first of opts, or nil.
func clientOptions(opts []*mcp.ClientOptions) *mcp.ClientOptions {
	if len(opts) == 0 {
		return nil
	}
	return opts[0]
}

// answer is what a caller learns of one call, whatever the protocol.
type answer struct {
	refused    bool
	rpcError   bool // a JSON-RPC error, or an HTTP answer that is not Problem Details of an operation
	status     int
	code       string
	retryAfter any
	errors     []any
	traceID    any
	body       map[string]any // the output on success
}

// httpCall posts body to url+path with headers and reads the answer.
func httpCall(t *testing.T, url, path, body string, headers map[string]string) answer {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+path, bytes.NewReader([]byte(body)))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	raw, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(raw, &m)
	a := answer{status: resp.StatusCode, refused: resp.StatusCode >= 400}
	if a.refused {
		a.code, _ = m["code"].(string)
		details, _ := m["details"].(map[string]any)
		a.retryAfter, a.errors, a.traceID = details["retryAfter"], asList(details["errors"]), m["traceId"]
	} else {
		a.body = m
	}
	return a
}

// mcpCall calls a tool and reads the answer.
func mcpCall(ctx context.Context, t *testing.T, cs *mcp.ClientSession, name string, args any, meta mcp.Meta) answer {
	t.Helper()
	// The SDK's client adds members to the Meta it is given (the
	// protocol version of 2026-07-28): each call gets a copy of its own.
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args, Meta: maps.Clone(meta)})
	if err != nil {
		return answer{refused: true, rpcError: true, code: err.Error()}
	}
	raw, _ := json.Marshal(res.StructuredContent)
	var m map[string]any
	_ = json.Unmarshal(raw, &m)
	if !res.IsError {
		var text map[string]any
		if tc, ok := res.Content[0].(*mcp.TextContent); !ok || json.Unmarshal([]byte(tc.Text), &text) != nil {
			t.Errorf("%s: content %v, want the output as JSON text", name, res.Content)
		} else if !jsonEqual(text, m) {
			t.Errorf("%s: text %v and structuredContent %v differ", name, text, m)
		}
		return answer{status: 200, body: m}
	}
	a := answer{refused: true}
	st, _ := m["status"].(float64)
	a.status = int(st)
	a.code, _ = m["code"].(string)
	details, _ := m["details"].(map[string]any)
	a.retryAfter, a.errors, a.traceID = details["retryAfter"], asList(details["errors"]), m["traceId"]
	if tc, ok := res.Content[0].(*mcp.TextContent); !ok || !bytes.Contains([]byte(tc.Text), []byte(a.code)) {
		t.Errorf("%s: text %v, want one sentence naming %s", name, res.Content, a.code)
	}
	return a
}

func asList(v any) []any { l, _ := v.([]any); return l }

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	var u, v any
	_ = json.Unmarshal(x, &u)
	_ = json.Unmarshal(y, &v)
	p, _ := json.Marshal(u)
	q, _ := json.Marshal(v)
	return bytes.Equal(p, q)
}

// wait receives from ch within a generous bound.
func wait[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
	var zero T
	return zero
}

var _ = pipeline.ProtocolMCP

type kernelOp = kernel.Op

// syncBuffer is a bytes.Buffer safe for concurrent use: a log's writer.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// span is the interval within which something happened, as the test
// observed it: from before it began to after it ended.
type span struct{ from, to time.Time }

// since returns the span from start to now.
func since(start time.Time) span { return span{start, time.Now()} }

// retryWithin reports whether retryAfter, a Problem's whole seconds
// rounded up, is what is left of a clock of length d that started within
// started, read within read. Each instant is known only to its span, so
// the value must lie in [lo, hi]: the seconds left at the latest and at
// the earliest reading those spans allow.
func retryWithin(retryAfter any, d time.Duration, started, read span) (lo, hi int64, ok bool) {
	secs := func(left time.Duration) int64 { return max(1, int64((left+time.Second-1)/time.Second)) }
	lo, hi = secs(d-read.to.Sub(started.from)), secs(d-read.from.Sub(started.to))
	v, num := retryAfter.(float64)
	return lo, hi, num && v == float64(int64(v)) && int64(v) >= lo && int64(v) <= hi
}

// startWait calls orders.wait in the background with meta and a deadline
// of ms milliseconds (sundial/timeoutMs), and returns once its handler
// has started, with the channel its answer comes on. On a loaded machine
// the deadline can pass before the kernel starts the handler, and the
// kernel then answers TIMEOUT without running it. Then, or when the
// answer came before the test saw the start, the call is made again with
// ten times the deadline, three tries in all.
func startWait(t *testing.T, cs *mcp.ClientSession, k *kernel.Kernel, p *probe, ms int, meta mcp.Meta) <-chan answer {
	t.Helper()
	for range 3 {
		m := maps.Clone(meta)
		if m == nil {
			m = mcp.Meta{}
		}
		m["sundial/timeoutMs"] = ms
		res := make(chan answer, 1)
		go func() { res <- mcpCall(context.Background(), t, cs, "orders.wait", map[string]any{}, m) }()
		select {
		case <-p.started:
			return res
		case a := <-res:
			if a.code != pipeline.CodeTimeout {
				t.Fatalf("orders.wait answered %+v before its handler was seen to start, want its TIMEOUT", a)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("orders.wait (deadline %d ms): neither started nor answered in 10 s", ms)
		}
		t.Logf("orders.wait (deadline %d ms) answered before its start was seen: once more", ms)
		// Whether or not the handler ran, let it end and forget it.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := k.Wait(ctx)
		cancel()
		if err != nil {
			t.Fatalf("orders.wait's handler still running 10 s after its answer: %v", err)
		}
		drain(p.started)
		drain(p.ended)
		drain(p.bag)
		ms *= 10
	}
	t.Fatalf("orders.wait's handler did not start before its deadline in three tries (the last %d ms)", ms/10)
	return nil
}

// drain empties ch of what it holds now.
func drain[T any](ch <-chan T) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}
