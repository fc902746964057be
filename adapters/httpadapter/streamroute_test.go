package httpadapter

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/labstack/echo/v4"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
	"github.com/sundial-go/sundial/resilience/stream"
)

// These tests serve streaming operations through Mount and the kernel
// (kernel.Op.Stream), on real loopback listeners.

type feedIn struct {
	Topic string `param:"topic" json:"topic"`
	Count int    `query:"count" json:"count"`
	Wait  bool   `query:"wait" json:"wait"`
	// GapMs: after Count messages, wait this long, then send one more.
	GapMs int `query:"gapMs" json:"gapMs"`
}

type feedEvent struct {
	Seq    int    `json:"seq"`
	Topic  string `json:"topic"`
	Resume string `json:"resume"`
}

type sumIn struct {
	N int `json:"n" validate:"min=0"`
}

type sumOut struct {
	Total int `json:"total"`
}

// streamApp is the streaming operations of a test and what they saw.
type streamApp struct {
	ctxEnded chan error // feed.watch with wait: its context's cause when it ended
}

func (app *streamApp) registry(t *testing.T) *operations.Registry {
	t.Helper()
	reg := operations.NewRegistry()
	err := errors.Join(
		operations.RegisterServerStream(reg, operations.Descriptor{ID: "feed.watch", Method: "GET", Path: "/feed/:topic"},
			func(ctx context.Context, in feedIn, s *operations.Sender[feedEvent]) error {
				for i := 1; i <= in.Count; i++ {
					if err := s.Send(feedEvent{Seq: i, Topic: in.Topic, Resume: s.Resume()}); err != nil {
						return err
					}
				}
				if in.GapMs > 0 {
					select {
					case <-time.After(time.Duration(in.GapMs) * time.Millisecond):
					case <-ctx.Done():
						return ctx.Err()
					}
					if err := s.Send(feedEvent{Seq: in.Count + 1, Topic: in.Topic}); err != nil {
						return err
					}
				}
				if !in.Wait {
					return nil
				}
				<-ctx.Done()
				app.ctxEnded <- context.Cause(ctx)
				return ctx.Err()
			}),
		operations.RegisterServerStream(reg, operations.Descriptor{ID: "feed.idle", Method: "GET", Path: "/idle/:topic"},
			func(ctx context.Context, in feedIn, s *operations.Sender[feedEvent]) error {
				if err := s.Send(feedEvent{Seq: 1, Topic: in.Topic}); err != nil {
					return err
				}
				<-ctx.Done()
				return ctx.Err()
			}),
		operations.RegisterServerStream(reg, operations.Descriptor{ID: "feed.flood", Method: "GET", Path: "/flood"},
			func(ctx context.Context, _ struct{}, s *operations.Sender[map[string]string]) error {
				pad := map[string]string{"pad": strings.Repeat("x", 64<<10)}
				for {
					if err := s.Send(pad); err != nil {
						return err
					}
				}
			}),
		operations.RegisterServerStream(reg, operations.Descriptor{ID: "feed.pinged", Method: "GET", Path: "/pinged"},
			func(ctx context.Context, _ struct{}, _ *operations.Sender[feedEvent]) error {
				<-ctx.Done()
				return ctx.Err()
			}),
		operations.RegisterServerStream(reg, operations.Descriptor{ID: "feed.post", Method: "POST", Path: "/feedpost"},
			func(_ context.Context, in feedIn, s *operations.Sender[feedEvent]) error {
				return s.Send(feedEvent{Seq: 1, Topic: in.Topic})
			}),
		operations.RegisterServerStream(reg, operations.Descriptor{ID: "feed.missing", Method: "GET", Path: "/missing"},
			func(context.Context, struct{}, *operations.Sender[feedEvent]) error {
				return pipeline.NewError(pipeline.KindNotFound, "TEST_NOT_FOUND_001", "no such feed")
			}),
		operations.RegisterClientStream(reg, operations.Descriptor{ID: "nums.sum", Method: "POST", Path: "/sum"},
			func(_ context.Context, r *operations.Receiver[sumIn]) (sumOut, error) {
				total := 0
				for {
					in, err := r.Recv()
					if err == io.EOF {
						return sumOut{total}, nil
					}
					if err != nil {
						return sumOut{}, err
					}
					total += in.N
				}
			}),
		operations.RegisterBidiStream(reg, operations.Descriptor{ID: "nums.lazy", Method: "GET", Path: "/lazy"},
			func(ctx context.Context, r *operations.Receiver[sumIn], s *operations.Sender[sumOut]) error {
				select { // receives nothing for 3 × (heartbeat + send stall)
				case <-time.After(lazyWait):
				case <-ctx.Done():
					return ctx.Err()
				}
				return echoDouble(r, s)
			}),
		operations.RegisterBidiStream(reg, operations.Descriptor{ID: "nums.echo", Method: "GET", Path: "/echo"},
			func(_ context.Context, r *operations.Receiver[sumIn], s *operations.Sender[sumOut]) error {
				return echoDouble(r, s)
			}),
	)
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

// echoDouble sends twice each number it receives, until the caller's last.
func echoDouble(r *operations.Receiver[sumIn], s *operations.Sender[sumOut]) error {
	for {
		in, err := r.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if err := s.Send(sumOut{in.N * 2}); err != nil {
			return err
		}
	}
}

// streamServer is a Mount of the stream app on a real listener.
type streamServer struct {
	url  string
	logs *pipelinetest.LogSink
	app  *streamApp
	a    *Adapter
}

// startStreamServer serves the stream app; hs, when not nil, sets the
// http.Server's own timeouts.
func startStreamServer(t *testing.T, hs *http.Server) *streamServer {
	t.Helper()
	app := &streamApp{ctxEnded: make(chan error, 4)}
	logs := new(pipelinetest.LogSink)
	k, err := kernel.New(kernel.WithRegistry(app.registry(t)), kernel.WithLogger(logs.Logger()),
		kernel.WithConfigJSON([]byte(`{"Sundial": {"Kernel": {"MaxTimeoutSeconds": 30,
			"Resilience": {"Operations": {
				"feed.idle": {"Stream": {"IdleSeconds": 0.6, "HeartbeatSeconds": 0.05}},
				"feed.flood": {"Stream": {"SendStallSeconds": 0.3}},
				"feed.pinged": {"Stream": {"HeartbeatSeconds": 0.05, "SendStallSeconds": 0.3}},
				"nums.lazy": {"Stream": {"HeartbeatSeconds": 0.05, "SendStallSeconds": 1}}}}}}}`)))
	if err != nil {
		t.Fatal(err)
	}
	e := echo.New()
	a, err := Mount(e, k)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if hs == nil {
		hs = &http.Server{ReadHeaderTimeout: 5 * time.Second}
	}
	hs.Handler = e
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = hs.Serve(ln)
	}()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := hs.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		<-served
		http.DefaultClient.CloseIdleConnections()
	})
	return &streamServer{url: "http://" + ln.Addr().String(), logs: logs, app: app, a: a}
}

// accessRecord waits for the access log record of the operation id.
func (s *streamServer) accessRecord(t *testing.T, id string) pipelinetest.Record {
	t.Helper()
	r, ok := s.logs.WaitFor(30*time.Second, func(r pipelinetest.Record) bool {
		return r.Message == "http request" && r.Attrs["operation"] == id
	})
	if !ok {
		t.Fatalf("no access log record of %s", id)
	}
	return r
}

// TestStreamRouteScenarios runs each row unchanged on SSE, NDJSON and a
// WebSocket, through the kernel: a stream that completes; the caller's
// deadline mid-stream, in-band TIMEOUT; the idle clock, in-band, which
// heartbeats do not reset; the caller leaving, whose handler's context
// ends, CANCELLED; a caller who never reads, the send stall; a failure
// before the first byte.
func TestStreamRouteScenarios(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr+"/completes", func(t *testing.T) {
			s := startStreamServer(t, nil)
			c := openStream(t, tr, s.url+"/feed/news?count=3", http.Header{"Last-Event-Id": {"41"}}, `{}`)
			defer c.close()
			got, err := readAll(c)
			if err != nil {
				t.Fatal(err)
			}
			var last feedEvent
			if len(got.msgs) != 3 || json.Unmarshal(got.msgs[2], &last) != nil || last.Seq != 3 || last.Topic != "news" {
				t.Fatalf("messages %s, want 3 of topic news", got.msgs)
			}
			if tr != "ws" && last.Resume != "41" {
				t.Fatalf("resume %q, want the Last-Event-ID 41", last.Resume)
			}
			if got.outcome == nil || got.outcome.Title != "OK" || (tr == "ws" && got.close != websocket.StatusNormalClosure) {
				t.Fatalf("outcome %+v close %d, want OK", got.outcome, got.close)
			}
			if r := s.accessRecord(t, "feed.watch"); r.Attrs["code"] != "" {
				t.Fatalf("access log %v, want no code", r.Attrs)
			}
		})
		t.Run(tr+"/deadline", func(t *testing.T) {
			s := startStreamServer(t, nil)
			// On a loaded machine the 400 ms can pass before the handler's
			// message goes out: before the kernel starts it (it then does
			// not run it), or before its Send (which then fails). The
			// stream then ends in TIMEOUT without a message, and is opened
			// again with ten times the deadline, at most the 30 s of
			// startStreamServer's MaxTimeoutSeconds, three tries in all.
			const maxMs = 30000
			for try, ms := 1, 400; ; try, ms = try+1, min(10*ms, maxMs) {
				got, early := deadlineStream(t, s, tr, ms)
				if early {
					// The stream's end goes out once its handler has
					// returned (Op.Stream returns after the handler, then
					// the route writes the end): a handler whose Send
					// succeeded reached its wait, and told of its
					// context's end, before that.
					select {
					case <-s.app.ctxEnded:
						t.Fatal("the handler sent its message and reached its wait, but the stream carried none")
					default:
					}
					if try == 3 {
						t.Fatalf("the deadline passed before the handler's message went out in three tries (the last %d ms)", ms)
					}
					t.Logf("the %d ms deadline passed before the handler's message went out: once more, with %d ms", ms, min(10*ms, maxMs))
					continue
				}
				if len(got.msgs) != 1 || got.outcome == nil || got.outcome.Code != pipeline.CodeTimeout ||
					got.outcome.Status != http.StatusGatewayTimeout || (tr == "ws" && got.close != 4504) {
					t.Fatalf("got %s, outcome %+v, close %d; want one message, then in-band TIMEOUT", got.msgs, got.outcome, got.close)
				}
				break
			}
			select {
			case <-s.app.ctxEnded:
			case <-time.After(10 * time.Second):
				t.Fatal("the handler's context did not end within 10 s of the stream's")
			}
		})
		t.Run(tr+"/caller-leaves", func(t *testing.T) {
			s := startStreamServer(t, nil)
			c := openStream(t, tr, s.url+"/feed/news?count=1&wait=true", nil, `{}`)
			if err := c.next(&received{}); err != nil {
				t.Fatal(err)
			}
			c.close()
			select {
			case <-s.app.ctxEnded:
			case <-time.After(30 * time.Second):
				t.Fatal("the handler's context did not end when the caller left")
			}
			if r := s.accessRecord(t, "feed.watch"); r.Attrs["code"] != pipeline.CodeCanceled {
				t.Fatalf("access log %v, want %s", r.Attrs, pipeline.CodeCanceled)
			}
		})
		t.Run(tr+"/idle", func(t *testing.T) {
			s := startStreamServer(t, nil)
			c := openStream(t, tr, s.url+"/idle/news", nil, `{}`)
			defer c.close()
			got, err := readAll(c)
			if err != nil {
				t.Fatal(err)
			}
			if len(got.msgs) != 1 || got.outcome == nil || got.outcome.Code != stream.CodeIdle ||
				(tr == "ws" && got.close != 4504) || got.heartbeats == 0 {
				t.Fatalf("got %s, %d heartbeats, outcome %+v, close %d; want one message, heartbeats, then %s",
					got.msgs, got.heartbeats, got.outcome, got.close, stream.CodeIdle)
			}
		})
		t.Run(tr+"/send-stall", func(t *testing.T) {
			s := startStreamServer(t, nil)
			c := openStream(t, tr, s.url+"/flood", nil, `{}`)
			defer c.close()
			if r := s.accessRecord(t, "feed.flood"); r.Attrs["code"] != stream.CodeSendStall {
				t.Fatalf("access log %v, want %s", r.Attrs, stream.CodeSendStall)
			}
		})
		t.Run(tr+"/before-first-byte", func(t *testing.T) {
			s := startStreamServer(t, nil)
			if tr == "ws" {
				got, err := readAll(openStream(t, tr, s.url+"/missing", nil, `{}`))
				if err != nil || got.close != 4404 || got.outcome == nil || got.outcome.Code != "TEST_NOT_FOUND_001" {
					t.Fatalf("close %d outcome %+v (%v), want 4404 TEST_NOT_FOUND_001", got.close, got.outcome, err)
				}
				return
			}
			c := openStream(t, tr, s.url+"/missing", nil)
			defer c.close()
			resp := responseOf(c)
			var p Problem
			if resp.StatusCode != http.StatusNotFound || json.NewDecoder(resp.Body).Decode(&p) != nil ||
				p.Code != "TEST_NOT_FOUND_001" {
				t.Fatalf("status %d, problem %+v; want 404 TEST_NOT_FOUND_001", resp.StatusCode, p)
			}
		})
	}
}

// deadlineStream reads a stream of feed.watch that sends one message,
// then waits for its context, under a deadline of ms. It reports early
// when the stream ended in TIMEOUT without a message: the deadline passed
// before the handler's message went out. Over SSE and NDJSON that is a
// 504 before the first byte; over a WebSocket, the in-band TIMEOUT. A
// stream that has not ended 20 s after its deadline fails the test.
func deadlineStream(t *testing.T, s *streamServer, tr string, ms int) (got *received, early bool) {
	t.Helper()
	bound := time.Duration(ms)*time.Millisecond + 20*time.Second
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	c := openStreamContext(ctx, t, tr, s.url+"/feed/news?count=1&wait=true",
		http.Header{DefaultRelativeDeadlineHeader: {strconv.Itoa(ms)}}, `{}`)
	defer c.close()
	if resp := responseOf(c); resp != nil && resp.StatusCode != http.StatusOK {
		var p Problem
		if resp.StatusCode != http.StatusGatewayTimeout || json.NewDecoder(resp.Body).Decode(&p) != nil || p.Code != pipeline.CodeTimeout {
			t.Fatalf("status %d, problem %+v; want the stream, or a 504 TIMEOUT before its first byte", resp.StatusCode, p)
		}
		return nil, true
	}
	got, err := readAll(c)
	if ctx.Err() != nil {
		t.Fatalf("the stream did not end within %v of its opening (deadline %d ms): %v", bound, ms, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	early = len(got.msgs) == 0 && got.outcome != nil && got.outcome.Code == pipeline.CodeTimeout &&
		got.outcome.Status == http.StatusGatewayTimeout && (tr != "ws" || got.close == 4504)
	return got, early
}

// TestWebSocketUnansweredPing: a WebSocket caller that reads nothing
// answers no ping, and the heartbeat blocked for SendStallSeconds ends the
// stream as a caller who does not read, KERNEL_CANCELLED_002.
func TestWebSocketUnansweredPing(t *testing.T) {
	s := startStreamServer(t, nil)
	c := openStream(t, "ws", s.url+"/pinged", nil, `{}`)
	defer c.close()
	if r := s.accessRecord(t, "feed.pinged"); r.Attrs["code"] != stream.CodeSendStall {
		t.Fatalf("access log %v, want %s", r.Attrs, stream.CodeSendStall)
	}
}

func responseOf(c streamClient) *http.Response {
	switch c := c.(type) {
	case *sseClient:
		return c.resp
	case *ndjsonClient:
		return c.resp
	}
	return nil
}

// TestStreamRouteClientAndBidi: a client stream reads an NDJSON body and
// answers as a unary call does; over a WebSocket it replies with one
// message. A bidi stream answers each message; over plain HTTP it is 426.
// A message that breaks the input's constraints is VALIDATION.
func TestStreamRouteClientAndBidi(t *testing.T) {
	s := startStreamServer(t, nil)
	resp, err := http.Post(s.url+"/sum", contentTypeNDJSON, strings.NewReader("{\"n\":1}\n{\"n\":2}\n{\"n\":3}\n"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(body)) != `{"total":6}` {
		t.Fatalf("POST /sum: %d %s, want 200 {\"total\":6}", resp.StatusCode, body)
	}
	resp, err = http.Post(s.url+"/sum", contentTypeNDJSON, strings.NewReader("{\"n\":1}\n{\"n\":-2}\n"))
	if err != nil {
		t.Fatal(err)
	}
	var p Problem
	_ = json.NewDecoder(resp.Body).Decode(&p)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || p.Title != "VALIDATION" {
		t.Fatalf("POST /sum with n -2: %d %+v, want 400 VALIDATION", resp.StatusCode, p)
	}

	got, err := readAll(openStream(t, "ws", s.url+"/sum", nil, `{"n":4}`, `{"n":5}`, ``))
	if err != nil || len(got.msgs) != 1 || string(got.msgs[0]) != `{"total":9}` || got.close != websocket.StatusNormalClosure {
		t.Fatalf("WebSocket /sum: %s close %d (%v), want {\"total\":9} and 1000", got.msgs, got.close, err)
	}
	got, err = readAll(openStream(t, "ws", s.url+"/echo", nil, `{"n":1}`, `{"n":2}`, ``))
	if err != nil || len(got.msgs) != 2 || string(got.msgs[1]) != `{"total":4}` || got.outcome == nil || got.outcome.Title != "OK" {
		t.Fatalf("WebSocket /echo: %s %+v (%v), want 2 replies then OK", got.msgs, got.outcome, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if conn, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(s.url, "http")+"/echo",
		&websocket.DialOptions{HTTPHeader: http.Header{"Origin": {"http://elsewhere.example"}}}); err == nil {
		conn.CloseNow()
		t.Fatal("a WebSocket from a foreign origin was accepted")
	} else if resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a foreign origin's handshake: %v, want 403", err)
	}
	resp, err = http.Get(s.url + "/echo")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUpgradeRequired || resp.Header.Get("Upgrade") != "websocket" {
		t.Fatalf("GET /echo without a WebSocket: %d, want 426 with Upgrade: websocket", resp.StatusCode)
	}
}

// TestStreamOutlivesServerTimeouts: the http.Server's ReadTimeout and
// WriteTimeout, shorter than the stream, neither end it nor read as the
// caller leaving. A message sent after both have passed arrives, and the
// stream ends OK.
func TestStreamOutlivesServerTimeouts(t *testing.T) {
	for _, tr := range []string{"sse", "ndjson"} {
		t.Run(tr, func(t *testing.T) {
			s := startStreamServer(t, &http.Server{ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond})
			c := openStream(t, tr, s.url+"/feed/news?count=1&gapMs=600", nil)
			defer c.close()
			got, err := readAll(c)
			if err != nil || len(got.msgs) != 2 || got.outcome == nil || got.outcome.Title != "OK" {
				t.Fatalf("got %s then %+v (%v), want two messages, then OK", got.msgs, got.outcome, err)
			}
			if r := s.accessRecord(t, "feed.watch"); r.Attrs["code"] != "" {
				t.Fatalf("access log %v, want no code", r.Attrs)
			}
		})
	}
}

// TestStreamOpenAPI: a server stream's success answers text/event-stream
// and application/x-ndjson, a client stream's body is NDJSON, a bidi
// stream answers 426 to plain HTTP; each answers 101 and names its kind.
func TestStreamOpenAPI(t *testing.T) {
	s := startStreamServer(t, nil)
	doc, err := s.a.OpenAPI(OpenAPIInfo{})
	if err != nil {
		t.Fatal(err)
	}
	watch := doc.Paths.Find("/feed/{topic}").Get
	ok := watch.Responses.Status(http.StatusOK).Value
	if ok.Content.Get(contentTypeSSE) == nil || ok.Content.Get(contentTypeNDJSON) == nil ||
		watch.Extensions["x-sundial-stream"] != "server-stream" || watch.Responses.Status(101) == nil {
		t.Fatalf("feed.watch: content %v, extensions %v", ok.Content, watch.Extensions)
	}
	sum := doc.Paths.Find("/sum").Post
	if sum.RequestBody.Value.Content.Get(contentTypeNDJSON) == nil || sum.Responses.Status(http.StatusOK) == nil {
		t.Fatalf("nums.sum: body %v", sum.RequestBody.Value.Content)
	}
	echo := doc.Paths.Find("/echo").Get
	if echo.Responses.Status(http.StatusUpgradeRequired) == nil || echo.Responses.Status(http.StatusOK) != nil {
		t.Fatalf("nums.echo: responses %v", echo.Responses.Map())
	}
}

// curlPath returns curl's path: a failure in CI when it is missing, a
// skip elsewhere.
func curlPath(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("curl")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("curl is missing; .ci/deps installs it")
		}
		t.Skip("curl is missing")
	}
	return p
}

// TestStreamCurl: `curl -N` reads SSE and NDJSON streams as they come: a
// whole stream with its outcome, and a first message while the handler
// still runs. Killing curl then is the caller leaving.
func TestStreamCurl(t *testing.T) {
	curl := curlPath(t)
	for _, tr := range []string{"sse", "ndjson"} {
		t.Run(tr, func(t *testing.T) {
			s := startStreamServer(t, nil)
			accept := contentTypeNDJSON
			if tr == "sse" {
				accept = contentTypeSSE
			}
			run := func(query string) (*exec.Cmd, streamClient) {
				// A deadline bounds a stream curl would hold back.
				cmd := exec.Command(curl, "-sN", "-H", "Accept: "+accept, "-H", DefaultRelativeDeadlineHeader+": 20000",
					s.url+"/feed/news?"+query)
				stdout, err := cmd.StdoutPipe()
				if err != nil {
					t.Fatal(err)
				}
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				br := bufio.NewReader(stdout)
				if tr == "sse" {
					return cmd, &sseClient{br: br}
				}
				return cmd, &ndjsonClient{br: br}
			}
			cmd, c := run("count=2")
			got, err := readAll(c)
			if werr := cmd.Wait(); err != nil || werr != nil || len(got.msgs) != 2 || got.outcome == nil || got.outcome.Title != "OK" {
				t.Fatalf("curl: %s then %+v (%v, %v), want 2 messages then OK", got.msgs, got.outcome, err, werr)
			}
			cmd, c = run("count=1&wait=true")
			if err := c.next(&received{}); err != nil {
				t.Fatal(err)
			}
			select {
			case <-s.app.ctxEnded:
				t.Fatal("the first message came only after the handler ended")
			default:
			}
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			<-s.app.ctxEnded
		})
	}
}

// TestStreamRequestIsReadUnderServerTimeouts: a server stream's request,
// its body or a WebSocket's first message, is read within
// streamRequestTimeout, and the server's own timeouts still apply while
// it is read. A caller that sends part of its request, or nothing, holds
// no connection until the stream deadline (30 s here).
func TestStreamRequestIsReadUnderServerTimeouts(t *testing.T) {
	const within = 15 * time.Second // well below the 30 s deadline
	t.Run("slow body", func(t *testing.T) {
		s := startStreamServer(t, &http.Server{ReadTimeout: 300 * time.Millisecond})
		conn, err := net.Dial("tcp", strings.TrimPrefix(s.url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_, err = io.WriteString(conn, "POST /feedpost HTTP/1.1\r\nHost: x\r\n"+
			"Content-Type: application/json\r\nContent-Length: 20\r\n\r\n{")
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		_ = conn.SetReadDeadline(start.Add(within))
		if _, err := io.ReadAll(conn); err != nil {
			t.Fatalf("after %v: %v; want the server to end the request", time.Since(start), err)
		}
	})
	t.Run("websocket sends nothing", func(t *testing.T) {
		s := startStreamServer(t, nil)
		c := openStream(t, "ws", s.url+"/feed/news?count=1", nil)
		defer c.close()
		start := time.Now()
		got, err := readAll(c)
		if err != nil || got.outcome == nil || got.outcome.Code != pipeline.CodeTimeout || len(got.msgs) != 0 {
			t.Fatalf("got %s then %+v (%v), want no message, then %s", got.msgs, got.outcome, err, pipeline.CodeTimeout)
		}
		if d := time.Since(start); d > within {
			t.Fatalf("answered after %v, want before %v", d, within)
		}
	})
}
