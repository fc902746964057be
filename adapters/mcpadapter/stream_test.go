package mcpadapter_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sundial-go/sundial/adapters/mcpadapter"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
)

// feedIn is the request of the test streams: the messages to send, and
// the bytes of padding in each.
type feedIn struct {
	Count int `json:"count" validate:"min=0,max=5000"`
	Pad   int `json:"pad" validate:"min=0,max=100000"`
}

// registerStreams registers the test streams. orders.feed sends its
// messages and returns; orders.tail sends them, then waits for its
// context to end, as orders.hush does; orders.ration is orders.feed,
// rate-limited; orders.gush
// sends 64 KiB messages until a Send fails. orders.upload and
// orders.chat take streams of inputs.
func registerStreams(t testing.TB, reg *operations.Registry, p *probe) {
	t.Helper()
	send := func(in feedIn, s *operations.Sender[order]) error {
		for i := 1; i <= in.Count; i++ {
			if err := s.Send(order{ID: "ord-" + strconv.Itoa(i), Name: strings.Repeat("x", in.Pad), Amount: i}); err != nil {
				return err
			}
		}
		return nil
	}
	feed := func(_ context.Context, in feedIn, s *operations.Sender[order]) error { return send(in, s) }
	tail := func(ctx context.Context, in feedIn, s *operations.Sender[order]) error {
		if err := send(in, s); err != nil {
			return err
		}
		p.started <- struct{}{}
		<-ctx.Done()
		p.ended <- context.Cause(ctx)
		return ctx.Err()
	}
	gush := func(_ context.Context, _ feedIn, s *operations.Sender[order]) error {
		err := send(feedIn{Count: 5000, Pad: 64 << 10}, s)
		p.sendErr <- err
		return err
	}
	for _, err := range []error{
		operations.RegisterServerStream(reg, operations.Descriptor{ID: "orders.feed", Summary: "Stream orders."}, feed),
		operations.RegisterServerStream(reg, operations.Descriptor{ID: "orders.tail", Summary: "Stream, then wait."}, tail),
		operations.RegisterServerStream(reg, operations.Descriptor{ID: "orders.ration", Summary: "A stream a minute."}, feed),
		operations.RegisterServerStream(reg, operations.Descriptor{ID: "orders.gush", Summary: "Stream big orders."}, gush),
		operations.RegisterServerStream(reg, operations.Descriptor{ID: "orders.hush", Summary: "Stream, then hush."}, tail),
		operations.RegisterClientStream(reg, operations.Descriptor{ID: "orders.upload", Summary: "Upload orders."},
			func(context.Context, *operations.Receiver[orderIn]) (done, error) { return done{OK: true}, nil }),
		operations.RegisterBidiStream(reg, operations.Descriptor{ID: "orders.chat", Summary: "Talk about orders."},
			func(context.Context, *operations.Receiver[orderIn], *operations.Sender[order]) error { return nil }),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// progress collects the progress notifications a client receives.
type progress chan *mcp.ProgressNotificationParams

func newProgress() progress { return make(progress, 4096) }

func (p progress) options() *mcp.ClientOptions {
	return &mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
		p <- r.Params
	}}
}

// streamAnswer is a server stream's tool result, decoded.
type streamAnswer struct {
	isError  bool
	text     string
	problem  map[string]any // structuredContent
	messages []order
	count    int
	omitted  int
}

// callStream calls a stream tool with the progress token token ("" none).
func callStream(ctx context.Context, t *testing.T, cs *mcp.ClientSession, name string, args any, meta mcp.Meta, token string) (streamAnswer, error) {
	t.Helper()
	p := &mcp.CallToolParams{Name: name, Arguments: args, Meta: maps.Clone(meta)}
	if token != "" {
		p.SetProgressToken(token)
	}
	res, err := cs.CallTool(ctx, p)
	if err != nil {
		return streamAnswer{}, err
	}
	raw, _ := json.Marshal(res.StructuredContent)
	var a streamAnswer
	_ = json.Unmarshal(raw, &a.problem)
	var body struct {
		Messages []order `json:"messages"`
		Count    int     `json:"count"`
		Omitted  int     `json:"omitted"`
	}
	if err := json.Unmarshal(raw, &body); err != nil {
		t.Errorf("%s: structuredContent %s: %v", name, raw, err) // not Fatal: called off the test's goroutine
	}
	a.isError, a.messages, a.count, a.omitted = res.IsError, body.Messages, body.Count, body.Omitted
	if tc, ok := res.Content[0].(*mcp.TextContent); ok {
		a.text = tc.Text
	}
	return a, nil
}

// sessions connects a client of m over Streamable HTTP and over stdio,
// each with the progress notifications it receives.
func sessions(t *testing.T, url string, m *mcpadapter.Server) map[string]struct {
	cs *mcp.ClientSession
	p  progress
} {
	h, s := newProgress(), newProgress()
	return map[string]struct {
		cs *mcp.ClientSession
		p  progress
	}{
		"streamable HTTP": {connectHTTP(t, url, h.options()), h},
		"stdio":           {connectStdio(t, m, s.options()), s},
	}
}

// TestToolStreamProgress: a server stream is a tool. Each message it sends
// is one progress notification, in order, with the call's progress token,
// the message's JSON as its message and the count so far as its progress.
// The result carries the messages and their count, over Streamable HTTP
// and stdio. Without a progress token, the result alone carries them.
func TestToolStreamProgress(t *testing.T) {
	k := newKernel(t, newProbe(), nil)
	url, m := serve(t, k, nil)
	for transport, c := range sessions(t, url, m) {
		t.Run(transport, func(t *testing.T) {
			const n = 50
			a, err := callStream(context.Background(), t, c.cs, "orders.feed", map[string]any{"count": n}, nil, "tok-"+transport)
			if err != nil || a.isError || a.count != n || a.omitted != 0 || len(a.messages) != n {
				t.Fatalf("orders.feed: %+v %v, want %d messages", a, err, n)
			}
			var text map[string]any
			if json.Unmarshal([]byte(a.text), &text) != nil || !jsonEqual(text, a.problem) {
				t.Errorf("text %q, want the structuredContent as JSON", a.text)
			}
			for i := 1; i <= n; i++ {
				got := wait(t, c.p, "a progress notification")
				want, _ := json.Marshal(order{ID: "ord-" + strconv.Itoa(i), Amount: i})
				if got.ProgressToken != "tok-"+transport || got.Progress != float64(i) || got.Message != string(want) {
					t.Fatalf("notification %d: token %v progress %v message %s; want %q %d %s",
						i, got.ProgressToken, got.Progress, got.Message, "tok-"+transport, i, want)
				}
				if a.messages[i-1].ID != "ord-"+strconv.Itoa(i) {
					t.Errorf("result message %d: %+v", i, a.messages[i-1])
				}
			}
			a, err = callStream(context.Background(), t, c.cs, "orders.feed", map[string]any{"count": 2}, nil, "")
			if err != nil || a.isError || a.count != 2 || len(a.messages) != 2 {
				t.Errorf("without a progress token: %+v %v, want both messages in the result", a, err)
			}
			select {
			case got := <-c.p:
				t.Errorf("a notification %+v for a call without a progress token", got)
			default:
			}
		})
	}
}

// TestToolStreamResultBounded: the result keeps the last messages, at most
// 1000 and 1 MiB of their JSON, and counts those omitted; the progress
// notifications carry every one.
func TestToolStreamResultBounded(t *testing.T) {
	k := newKernel(t, newProbe(), nil)
	url, _ := serve(t, k, nil)
	cs := connectHTTP(t, url)
	a, err := callStream(context.Background(), t, cs, "orders.feed", map[string]any{"count": 1500}, nil, "")
	if err != nil || a.count != 1500 || a.omitted != 500 || len(a.messages) != 1000 || a.messages[0].ID != "ord-501" {
		t.Errorf("1500 messages: count %d omitted %d kept %d (%v), want the last 1000", a.count, a.omitted, len(a.messages), err)
	}
	a, err = callStream(context.Background(), t, cs, "orders.feed", map[string]any{"count": 40, "pad": 100000}, nil, "")
	kept := 0
	for _, o := range a.messages {
		b, _ := json.Marshal(o)
		kept += len(b)
	}
	if err != nil || a.count != 40 || kept > 1<<20 || a.omitted != 40-len(a.messages) || a.messages[len(a.messages)-1].ID != "ord-40" {
		t.Errorf("40 messages of 100 kB: count %d omitted %d kept %d bytes (%v), want the last within 1 MiB", a.count, a.omitted, kept, err)
	}
}

// TestToolStreamDeadline: the caller's deadline (sundial/timeoutMs) passing
// mid-stream ends it with TIMEOUT, KERNEL_TIMEOUT_001: the result is
// isError, with the Problem Details of a unary call's timeout and the
// messages sent so far.
func TestToolStreamDeadline(t *testing.T) {
	p := newProbe()
	k := newKernel(t, p, nil)
	url, m := serve(t, k, nil)
	unary := connectHTTP(t, url)
	res, err := unary.CallTool(context.Background(), &mcp.CallToolParams{Name: "orders.wait", Arguments: map[string]any{},
		Meta: mcp.Meta{"sundial/timeoutMs": 20}})
	if err != nil {
		t.Fatal(err)
	}
	// On a loaded machine the 20 ms may pass before the handler starts,
	// and the kernel then never runs it. Once no handler runs, what the
	// unary one told, if it ran, is taken: the stream's handler tells its
	// own.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := k.Wait(ctx); err != nil {
		t.Fatalf("the unary handler still runs 10 s after its deadline: %v", err)
	}
	drain(p.started)
	drain(p.ended)
	var want map[string]any
	raw, _ := json.Marshal(res.StructuredContent)
	_ = json.Unmarshal(raw, &want)
	for transport, c := range sessions(t, url, m) {
		t.Run(transport, func(t *testing.T) {
			a, token := tailToItsWait(t, c.cs, p, 1500)
			if err := wait(t, p.ended, "the handler's context to end"); pipeline.AsError(err).Code() != pipeline.CodeTimeout {
				t.Errorf("handler context ended with %v, want its deadline", err)
			}
			if !a.isError || a.problem["code"] != pipeline.CodeTimeout || a.count != 3 || len(a.messages) != 3 {
				t.Fatalf("orders.tail past its deadline: %+v, want isError %s with 3 messages", a, pipeline.CodeTimeout)
			}
			for key, v := range want {
				switch key {
				case "instance":
					v = "tools/call orders.tail"
				case "traceId":
					continue
				}
				if !jsonEqual(a.problem[key], v) {
					t.Errorf("%s: %v, want %v as for a unary call", key, a.problem[key], v)
				}
			}
			if len(a.problem) != len(want)+3 || !strings.HasPrefix(a.text, "timed out") || !strings.HasSuffix(a.text, "("+pipeline.CodeTimeout+").") {
				t.Errorf("problem %v, text %q; want a unary call's plus messages, count and omitted", a.problem, a.text)
			}
			for range 3 {
				for got := wait(t, c.p, "a progress notification"); got.ProgressToken != token; {
					got = wait(t, c.p, "a progress notification") // an earlier try's
				}
			}
		})
	}
}

// tailToItsWait calls orders.tail for three messages, then a wait until
// its context ends, with a deadline of ms milliseconds (sundial/timeoutMs)
// and a progress token of its own. It returns the answer of the call
// whose handler got to its wait, and that call's token.
//
// On a loaded machine the deadline can pass before the handler gets to
// its wait: the kernel never starts a handler whose deadline has passed,
// and one that starts just before fails a Send. The call is then made
// again with ten times the deadline, three tries in all.
func tailToItsWait(t *testing.T, cs *mcp.ClientSession, p *probe, ms int) (streamAnswer, string) {
	t.Helper()
	for try := 1; ; try++ {
		token := "tok-" + strconv.Itoa(try)
		// The call ends at its deadline; the bound, 20 s past it, is for
		// one that does not.
		bound := time.Duration(ms)*time.Millisecond + 20*time.Second
		ctx, cancel := context.WithTimeout(context.Background(), bound)
		a, err := callStream(ctx, t, cs, "orders.tail", map[string]any{"count": 3},
			mcp.Meta{"sundial/timeoutMs": ms}, token)
		expired := ctx.Err() != nil
		cancel()
		if expired {
			t.Fatalf("orders.tail (deadline %d ms): no answer within %v: %v", ms, bound, err)
		}
		if err != nil {
			t.Fatal(err)
		}
		// The result leaves once the handler has returned: one that got
		// to its wait has told so by now.
		select {
		case <-p.started:
			return a, token
		default:
		}
		if !a.isError || a.problem["code"] != pipeline.CodeTimeout {
			t.Fatalf("orders.tail (deadline %d ms) answered %+v before its handler got to its wait, want its TIMEOUT", ms, a)
		}
		if try == 3 {
			t.Fatalf("orders.tail's handler did not get to its wait before its deadline in three tries (the last %d ms)", ms)
		}
		t.Logf("orders.tail (deadline %d ms) ended before its handler got to its wait: once more", ms)
		ms *= 10
	}
}

// TestToolStreamCancelled: a client that gives up on a stream tool call sends
// notifications/cancelled: the handler's context ends, and the access
// log records CANCELLED, KERNEL_CANCELLED_001.
func TestToolStreamCancelled(t *testing.T) {
	p := newProbe()
	var log syncBuffer
	k := newKernel(t, p, &log)
	url, m := serve(t, k, nil)
	for transport, c := range sessions(t, url, m) {
		t.Run(transport, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			errc := make(chan error, 1)
			go func() {
				_, err := callStream(ctx, t, c.cs, "orders.tail", map[string]any{"count": 2}, nil, "tok")
				errc <- err
			}()
			wait(t, c.p, "the first message")
			wait(t, c.p, "the second message")
			wait(t, p.started, "the handler to wait")
			cancel()
			if err := wait(t, p.ended, "the handler's context to end"); pipeline.AsError(err).Code() != pipeline.CodeCanceled {
				t.Errorf("handler context ended with %v, want %s", err, pipeline.CodeCanceled)
			}
			if err := wait(t, errc, "the call to return"); !errors.Is(err, context.Canceled) {
				t.Errorf("CallTool: %v, want context.Canceled", err)
			}
		})
	}
	deadline := time.Now().Add(10 * time.Second)
	for strings.Count(log.String(), `"operation":"orders.tail","session"`) < 2 ||
		strings.Count(log.String(), `"code":"`+pipeline.CodeCanceled+`"`) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("access log %s, want both calls recorded as %s", log.String(), pipeline.CodeCanceled)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestToolStreamRateLimited: a stream tool call over the operation's rate
// limit is refused as a unary call is: the same code, status, retry-after
// and sentence, and the handler never runs. Each retry-after is what is
// left of its own window at its own refusal: both windows start with the
// kernel, but the refusals come at different instants, so the two may
// round to different seconds.
func TestToolStreamRateLimited(t *testing.T) {
	start := time.Now()
	k := newKernel(t, newProbe(), nil)
	url, _ := serve(t, k, nil)
	windows := since(start) // orders.limited's and orders.ration's windows start in it
	cs := connectHTTP(t, url)
	ctx := context.Background()
	mcpCall(ctx, t, cs, "orders.limited", map[string]any{}, nil)
	start = time.Now()
	unary := mcpCall(ctx, t, cs, "orders.limited", map[string]any{}, nil)
	unaryRefused := since(start)
	if a, err := callStream(ctx, t, cs, "orders.ration", map[string]any{"count": 1}, nil, ""); err != nil || a.isError || a.count != 1 {
		t.Fatalf("the first stream: %+v %v", a, err)
	}
	start = time.Now()
	a, err := callStream(ctx, t, cs, "orders.ration", map[string]any{"count": 1}, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	streamRefused := since(start)
	details, _ := a.problem["details"].(map[string]any)
	if !a.isError || a.problem["code"] != unary.code || a.problem["status"] != float64(unary.status) ||
		a.count != 0 || len(a.messages) != 0 {
		t.Errorf("the second stream: %+v, want the unary refusal %+v and no message", a, unary)
	}
	if lo, hi, ok := retryWithin(unary.retryAfter, time.Minute, windows, unaryRefused); !ok {
		t.Errorf("the unary refusal's retryAfter %v, want whole seconds in [%d, %d]", unary.retryAfter, lo, hi)
	}
	if lo, hi, ok := retryWithin(details["retryAfter"], time.Minute, windows, streamRefused); !ok {
		t.Errorf("the stream's retryAfter %v, want whole seconds in [%d, %d]", details["retryAfter"], lo, hi)
	}
	if want := fmt.Sprintf("rate limited; retry after %v seconds (KERNEL_UNAVAILABLE_002).", details["retryAfter"]); a.text != want {
		t.Errorf("text %q, want the unary call's sentence %q", a.text, want)
	}
}

// TestToolStreamSendStall: a client that never reads its event stream cannot
// hold the server. The handler's blocked Send returns at the operation's
// send stall, CANCELLED KERNEL_CANCELLED_002, and the access log records
// it. The notification's write, still blocked a second later, is failed:
// the request's handler returns and the connection ends.
func TestToolStreamSendStall(t *testing.T) {
	p := newProbe()
	var log syncBuffer
	k := newKernel(t, p, &log)
	m, err := mcpadapter.New(k, nil)
	if err != nil {
		t.Fatal(err)
	}
	returned := make(chan struct{}, 1) // the tools/call request's handler returned
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.ServeHTTP(w, r)
		if r.Header.Get("Test-Call") != "" {
			returned <- struct{}{}
		}
	})}
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.Serve(ln) }()
	defer func() {
		_ = m.Shutdown(context.Background())
		srv.Close()
		<-served
	}()
	url := "http://" + ln.Addr().String()
	sid := initialize(t, url)
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"orders.gush","arguments":{},` +
		`"_meta":{"progressToken":"tok"}}}`
	fmt.Fprintf(conn, "POST /mcp HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nTest-Call: 1\r\n"+
		"Accept: application/json, text/event-stream\r\nMcp-Session-Id: %s\r\nMcp-Protocol-Version: %s\r\n"+
		"Content-Length: %d\r\n\r\n%s", ln.Addr(), sid, protocolVersion, len(body), body)
	err = wait(t, p.sendErr, "the blocked Send to return")
	if pipeline.AsError(err).Code() != "KERNEL_CANCELLED_002" {
		t.Fatalf("Send: %v, want KERNEL_CANCELLED_002", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(log.String(), `"operation":"orders.gush"`) {
		if time.Now().After(deadline) {
			t.Fatalf("access log %s, want orders.gush recorded", log.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if !strings.Contains(log.String(), `"code":"KERNEL_CANCELLED_002"`) {
		t.Errorf("access log %s, want KERNEL_CANCELLED_002", log.String())
	}
	wait(t, returned, "the request's handler to return while the client reads nothing")
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	var got bytes.Buffer
	_, err = io.Copy(&got, conn)
	if ne, ok := errors.AsType[net.Error](err); !ok || !ne.Timeout() {
		return // the connection ended: the blocked write was failed
	}
	// The connection is still open. That holds the server only if the
	// response is unfinished. On a loaded machine the stall can come from
	// a Send starved of CPU before the socket buffers filled. Then the
	// notification's write completes within the grace, nothing is failed,
	// and the whole response, the tool result last, is already written.
	b := got.Bytes()
	last := b[max(0, bytes.LastIndex(b, []byte("event: message"))):]
	if !bytes.HasSuffix(b, []byte("\r\n0\r\n\r\n")) || !bytes.Contains(last, []byte(`"id":2,`)) ||
		!bytes.Contains(last, []byte("KERNEL_CANCELLED_002")) {
		t.Errorf("read %d bytes, ending %q; the connection is still open 10 s later, its response unfinished",
			len(b), b[max(0, len(b)-300):])
	}
}

// protocolVersion is the MCP version the raw client speaks.
const protocolVersion = "2025-06-18"

// initialize opens a session with raw HTTP and returns its ID.
func initialize(t *testing.T, url string) string {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	post := func(sid, body string) *http.Response {
		req, _ := http.NewRequest(http.MethodPost, url+"/mcp", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Protocol-Version", protocolVersion)
		if sid != "" {
			req.Header.Set("Mcp-Session-Id", sid)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	resp := post("", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"`+protocolVersion+
		`","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	sid := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != http.StatusOK || sid == "" {
		t.Fatalf("initialize: %d, session %q", resp.StatusCode, sid)
	}
	if resp := post(sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("notifications/initialized: %d", resp.StatusCode)
	}
	return sid
}

// TestToolStreamSchemas: a server stream's tool takes its request's schema as
// inputSchema; its outputSchema is an object of the messages, each of
// the message type's schema, their count and those omitted.
func TestToolStreamSchemas(t *testing.T) {
	k := newKernel(t, newProbe(), nil)
	url, _ := serve(t, k, &mcpadapter.Options{Operations: []string{"orders.feed"}})
	res, err := connectHTTP(t, url).ListTools(context.Background(), nil)
	if err != nil || len(res.Tools) != 1 {
		t.Fatalf("tools %v (%v), want orders.feed", res, err)
	}
	in, _ := json.Marshal(res.Tools[0].InputSchema)
	out, _ := json.Marshal(res.Tools[0].OutputSchema)
	for _, c := range []string{`"count":{`, `"maximum":5000`, `"pad":{`} {
		if !strings.Contains(string(in), c) {
			t.Errorf("inputSchema %s lacks %s", in, c)
		}
	}
	for _, c := range []string{`"messages":{`, `"items":{`, `"amount":{`, `"omitted":{`, `"required":["messages","count","omitted"]`} {
		if !strings.Contains(string(out), c) {
			t.Errorf("outputSchema %s lacks %s", out, c)
		}
	}
}

// TestToolStreamSendStallStdio: over stdio too, a client that stops
// reading cannot hold the handler: its blocked Send returns at the send
// stall, KERNEL_CANCELLED_002, though the write stays blocked until the
// client reads or closes its end.
func TestToolStreamSendStallStdio(t *testing.T) {
	p := newProbe()
	k := newKernel(t, p, nil)
	m, err := mcpadapter.New(k, nil)
	if err != nil {
		t.Fatal(err)
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	served := make(chan error, 1)
	go func() { served <- m.ServeStdio(context.Background(), inR, outW) }()
	defer func() {
		inW.Close()
		outR.Close()
		wait(t, served, "ServeStdio to return")
	}()
	lines := bufio.NewReader(outR)
	send := func(line string) {
		if _, err := io.WriteString(inW, line+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"` + protocolVersion +
		`","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	if line, err := lines.ReadString('\n'); err != nil || !strings.Contains(line, `"id":1`) {
		t.Fatalf("initialize: %q %v", line, err)
	}
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"orders.gush","arguments":{},` +
		`"_meta":{"progressToken":"tok"}}}`)
	if err := wait(t, p.sendErr, "the blocked Send to return"); pipeline.AsError(err).Code() != "KERNEL_CANCELLED_002" {
		t.Fatalf("Send: %v, want KERNEL_CANCELLED_002", err)
	}
}

// TestToolStreamIdleAndDrain: the stream's idle clock ends a stream tool
// call whose handler went silent: TIMEOUT KERNEL_TIMEOUT_003, silent
// "handler", with the messages sent. Kernel.DrainStreams ends one in
// progress with UNAVAILABLE KERNEL_UNAVAILABLE_012, a retry-after of 1 s
// and its messages.
func TestToolStreamIdleAndDrain(t *testing.T) {
	p := newProbe()
	k := newKernel(t, p, nil)
	url, _ := serve(t, k, nil)
	cs := connectHTTP(t, url)
	a, err := callStream(context.Background(), t, cs, "orders.hush", map[string]any{"count": 1}, nil, "")
	details, _ := a.problem["details"].(map[string]any)
	if err != nil || !a.isError || a.problem["code"] != "KERNEL_TIMEOUT_003" || details["silent"] != "handler" || a.count != 1 {
		t.Errorf("a silent handler: %+v %v, want KERNEL_TIMEOUT_003, silent handler, 1 message", a, err)
	}
	wait(t, p.started, "the silent handler")
	wait(t, p.ended, "the silent handler to end")
	res := make(chan streamAnswer, 1)
	go func() {
		a, _ := callStream(context.Background(), t, cs, "orders.tail", map[string]any{"count": 2}, nil, "")
		res <- a
	}()
	wait(t, p.started, "the stream to send its messages")
	k.DrainStreams()
	a = wait(t, res, "the drained call's result")
	details, _ = a.problem["details"].(map[string]any)
	if !a.isError || a.problem["code"] != "KERNEL_UNAVAILABLE_012" || details["retryAfter"] != float64(1) || a.count != 2 {
		t.Errorf("a drained stream: %+v, want KERNEL_UNAVAILABLE_012, retryAfter 1, 2 messages", a)
	}
	wait(t, p.ended, "the drained handler to end")
}

// TestToolStreamPending: a stream tool call counts as in progress for
// MaxPending until its stream ends.
func TestToolStreamPending(t *testing.T) {
	p := newProbe()
	k := newKernel(t, p, nil)
	url, _ := serve(t, k, &mcpadapter.Options{MaxPending: 1})
	cs := connectHTTP(t, url)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "orders.tail", Arguments: map[string]any{"count": 1}})
		errc <- err
	}()
	wait(t, p.started, "the stream to start")
	if a := mcpCall(context.Background(), t, cs, "orders.limited", map[string]any{}, nil); a.code != "MCP_UNAVAILABLE_001" {
		t.Errorf("a call while the stream runs: %+v, want MCP_UNAVAILABLE_001", a)
	}
	cancel()
	wait(t, errc, "the stream call to end")
	wait(t, p.ended, "the handler to end")
}

// BenchmarkToolStreamProgress: one stream tool call over Streamable HTTP
// on loopback, b.N messages, each a progress notification the SDK's
// client receives.
func BenchmarkToolStreamProgress(b *testing.B) {
	k := newKernel(b, newProbe(), nil)
	url, _ := serve(b, k, nil)
	got := newProgress()
	cs := connectHTTP(b, url, got.options())
	n := min(b.N, 5000)
	b.ResetTimer()
	for done := 0; done < b.N; done += n {
		p := &mcp.CallToolParams{Name: "orders.feed", Arguments: map[string]any{"count": min(n, b.N-done)}}
		p.SetProgressToken("bench")
		if _, err := cs.CallTool(context.Background(), p); err != nil {
			b.Fatal(err)
		}
		for range min(n, b.N-done) {
			<-got
		}
	}
}
