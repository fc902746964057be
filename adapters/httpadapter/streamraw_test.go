package httpadapter

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/labstack/echo/v4"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience/stream"
)

// These tests run each transport's stream.Raw under stream.Open directly,
// as the kernel does, over real loopback connections.

type num struct {
	N int `json:"n"`
}

func decodeNum(b []byte) (any, *pipeline.Error) {
	var n num
	if err := json.Unmarshal(b, &n); err != nil {
		return nil, pipeline.Wrap(pipeline.KindValidation, codeMalformedBody, "not a number message", err)
	}
	return &n, nil
}

// rawServer serves one streaming route, /s, whose streams run handler
// under stream.Open with the config cfg returns.
type rawServer struct {
	url     string
	results chan stream.Result
}

func newRawServer(t *testing.T, kind stream.Kind, cfg func() stream.Config, heartbeat time.Duration,
	handler func(*stream.Stream) error) *rawServer {
	t.Helper()
	a := &Adapter{logger: slog.New(slog.DiscardHandler), cfg: defaultConfig()}
	srv := &rawServer{results: make(chan stream.Result, 16)}
	e := echo.New()
	serve := func(c echo.Context) error {
		x := a.newExchange(c)
		defer x.release()
		var t streamTransport
		ctx := c.Request().Context()
		if isWebSocket(c.Request()) {
			w, wctx, cancel, err := acceptWS(c, ctx, 1<<10, kind == stream.Server, decodeNum)
			if err != nil {
				return nil
			}
			defer cancel(nil)
			t, ctx = w, wctx
			if kind == stream.Server { // the request, as Decode reads it
				if _, err := w.next(time.Time{}); err != nil {
					return nil
				}
			}
		} else {
			t = openHTTP(c, 1<<10, kind == stream.Client, decodeNum)
		}
		s := stream.Open(ctx, t, cfg())
		if hb, ok := t.(interface{ Heartbeat() error }); ok && heartbeat > 0 {
			stop := make(chan struct{})
			done := make(chan struct{})
			go func() {
				defer close(done)
				tick := time.NewTicker(heartbeat)
				defer tick.Stop()
				for {
					select {
					case <-tick.C:
						_ = hb.Heartbeat()
					case <-stop:
						return
					case <-s.Context().Done():
						return
					}
				}
			}()
			defer func() { close(stop); <-done }()
		}
		res := s.Close(handler(s))
		srv.results <- res
		x.endStream(t, kernel.Outcome{Err: res.Err})
		return nil
	}
	e.GET("/s", serve)
	e.POST("/s", serve)
	ts := httptest.NewServer(e)
	t.Cleanup(ts.Close)
	srv.url = ts.URL + "/s"
	return srv
}

func (s *rawServer) result(t *testing.T) stream.Result {
	t.Helper()
	select {
	case r := <-s.results:
		return r
	case <-time.After(30 * time.Second):
		t.Fatal("no stream ended")
		return stream.Result{}
	}
}

var transports = []string{"sse", "ndjson", "ws"}

// sendN sends n messages and returns.
func sendN(n int) func(*stream.Stream) error {
	return func(s *stream.Stream) error {
		for i := 1; i <= n; i++ {
			if err := s.Send(num{i}); err != nil {
				return err
			}
		}
		return nil
	}
}

// sendThenWait sends one message, then waits for the stream to end.
func sendThenWait(s *stream.Stream) error {
	if err := s.Send(num{1}); err != nil {
		return err
	}
	<-s.Context().Done()
	return context.Cause(s.Context())
}

func noConfig() stream.Config { return stream.Config{Kind: stream.Server} }

// TestStreamFraming: SSE events carry ids 1, 2, 3 and event "message";
// NDJSON one line a message; each ends with the OK outcome, a WebSocket
// with close code 1000.
func TestStreamFraming(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			srv := newRawServer(t, stream.Server, noConfig, 0, sendN(3))
			c := openStream(t, tr, srv.url, nil, `{}`)
			defer c.close()
			got, err := readAll(c)
			if err != nil {
				t.Fatal(err)
			}
			if len(got.msgs) != 3 || string(got.msgs[2]) != `{"n":3}` {
				t.Fatalf("messages %s, want n 1 to 3", got.msgs)
			}
			if tr == "sse" && strings.Join(got.ids, ",") != "1,2,3" {
				t.Fatalf("SSE ids %q, want 1,2,3", got.ids)
			}
			if got.outcome == nil || got.outcome.Title != "OK" || got.outcome.Status != 200 || got.outcome.Code != "" {
				t.Fatalf("outcome %+v, want OK 200", got.outcome)
			}
			if tr == "ws" && got.close != websocket.StatusNormalClosure {
				t.Fatalf("close code %d, want 1000", got.close)
			}
			if r := srv.result(t); r.Reason != stream.EndCompleted || r.Sent != 3 {
				t.Fatalf("result %+v, want completed with 3 sent", r)
			}
		})
	}
}

// TestStreamOutcomeInBand: a clock that ends the stream after its first
// message gives the outcome in-band, with the code of the clock: the
// deadline TIMEOUT 001 (WebSocket 4504), idle TIMEOUT 003.
func TestStreamOutcomeInBand(t *testing.T) {
	rows := []struct {
		name string
		cfg  func() stream.Config
		code string
	}{
		{"deadline", func() stream.Config {
			return stream.Config{Kind: stream.Server, Deadline: time.Now().Add(300 * time.Millisecond)}
		}, pipeline.CodeTimeout},
		{"idle", func() stream.Config {
			return stream.Config{Kind: stream.Server, Idle: 300 * time.Millisecond}
		}, stream.CodeIdle},
	}
	for _, row := range rows {
		for _, tr := range transports {
			t.Run(row.name+"/"+tr, func(t *testing.T) {
				srv := newRawServer(t, stream.Server, row.cfg, 0, sendThenWait)
				c := openStream(t, tr, srv.url, nil, `{}`)
				defer c.close()
				got, err := readAll(c)
				if err != nil {
					t.Fatal(err)
				}
				if len(got.msgs) != 1 || got.outcome == nil || got.outcome.Code != row.code ||
					got.outcome.Status != http.StatusGatewayTimeout || got.outcome.Title != "TIMEOUT" {
					t.Fatalf("got %s then %+v, want one message then %s", got.msgs, got.outcome, row.code)
				}
				if tr == "ws" && got.close != 4504 {
					t.Fatalf("close code %d, want 4504", got.close)
				}
				if r := srv.result(t); r.Err == nil || pipeline.AsError(r.Err).Code() != row.code {
					t.Fatalf("result %+v, want %s", r, row.code)
				}
			})
		}
	}
}

// TestStreamHeartbeats: SSE heartbeats are comments and NDJSON's empty
// lines. They do not reset the idle clock, which still ends the stream.
func TestStreamHeartbeats(t *testing.T) {
	for _, tr := range []string{"sse", "ndjson"} {
		t.Run(tr, func(t *testing.T) {
			cfg := func() stream.Config { return stream.Config{Kind: stream.Server, Idle: time.Second} }
			srv := newRawServer(t, stream.Server, cfg, 10*time.Millisecond, sendThenWait)
			c := openStream(t, tr, srv.url, nil)
			defer c.close()
			got, err := readAll(c)
			if err != nil {
				t.Fatal(err)
			}
			if got.heartbeats == 0 || got.outcome == nil || got.outcome.Code != stream.CodeIdle {
				t.Fatalf("%d heartbeats then %+v, want some, then %s", got.heartbeats, got.outcome, stream.CodeIdle)
			}
		})
	}
}

// TestStreamDrainRetry: a drained stream's outcome has its retry-after,
// and SSE's retry field says it in milliseconds.
func TestStreamDrainRetry(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			srv := newRawServer(t, stream.Server, noConfig, 0, func(s *stream.Stream) error {
				if err := s.Send(num{1}); err != nil {
					return err
				}
				s.Drain(3 * time.Second)
				return s.Send(num{2})
			})
			c := openStream(t, tr, srv.url, nil, `{}`)
			defer c.close()
			got, err := readAll(c)
			if err != nil {
				t.Fatal(err)
			}
			if got.outcome == nil || got.outcome.Code != stream.CodeDrained || got.outcome.Details["retryAfter"] != 3.0 {
				t.Fatalf("outcome %+v, want %s with retryAfter 3", got.outcome, stream.CodeDrained)
			}
			if tr == "sse" && got.retry != "3000" {
				t.Fatalf("SSE retry %q, want 3000", got.retry)
			}
		})
	}
}

// TestStreamBeforeFirstByte: a failure before any message is answered as
// a unary call's: the status and Problem Details. A WebSocket, upgraded,
// closes with 4000 plus the status after the outcome.
func TestStreamBeforeFirstByte(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			srv := newRawServer(t, stream.Server, noConfig, 0, func(*stream.Stream) error {
				return pipeline.NewError(pipeline.KindNotFound, "TEST_NOT_FOUND_001", "no such feed")
			})
			c := openStream(t, tr, srv.url, nil, `{}`)
			defer c.close()
			if tr != "ws" {
				var resp *http.Response
				switch c := c.(type) {
				case *sseClient:
					resp = c.resp
				case *ndjsonClient:
					resp = c.resp
				}
				var p Problem
				if resp.StatusCode != http.StatusNotFound || resp.Header.Get("Content-Type") != ContentTypeProblem ||
					json.NewDecoder(resp.Body).Decode(&p) != nil || p.Code != "TEST_NOT_FOUND_001" {
					t.Fatalf("status %d %s, problem %+v; want 404 Problem Details", resp.StatusCode,
						resp.Header.Get("Content-Type"), p)
				}
				return
			}
			got, err := readAll(c)
			if err != nil {
				t.Fatal(err)
			}
			if got.close != 4404 || got.outcome == nil || got.outcome.Code != "TEST_NOT_FOUND_001" {
				t.Fatalf("close %d outcome %+v, want 4404 TEST_NOT_FOUND_001", got.close, got.outcome)
			}
		})
	}
}

// TestStreamCallerLeaves: a caller who closes the connection after the
// first message ends the handler's context, CANCELLED 001.
func TestStreamCallerLeaves(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			srv := newRawServer(t, stream.Server, noConfig, 0, sendThenWait)
			c := openStream(t, tr, srv.url, nil, `{}`)
			if err := c.next(&received{}); err != nil {
				t.Fatal(err)
			}
			c.close()
			r := srv.result(t)
			if r.Reason != stream.EndCallerLeft || pipeline.AsError(r.Err).Code() != pipeline.CodeCanceled {
				t.Fatalf("result %v %v, want caller_left %s", r.Reason, r.Err, pipeline.CodeCanceled)
			}
		})
	}
}

// TestStreamSendStall: a caller who never reads ends the stream with
// KERNEL_CANCELLED_002 once a Send has blocked for SendStall; the
// blocked Send returns.
func TestStreamSendStall(t *testing.T) {
	big := strings.Repeat("x", 64<<10)
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			cfg := func() stream.Config { return stream.Config{Kind: stream.Server, SendStall: 200 * time.Millisecond} }
			srv := newRawServer(t, stream.Server, cfg, 0, func(s *stream.Stream) error {
				for {
					if err := s.Send(map[string]string{"pad": big}); err != nil {
						return err
					}
				}
			})
			c := openStream(t, tr, srv.url, nil, `{}`)
			defer c.close()
			r := srv.result(t)
			if r.Reason != stream.EndSlowConsumer || pipeline.AsError(r.Err).Code() != stream.CodeSendStall {
				t.Fatalf("result %v %v, want slow_consumer %s", r.Reason, r.Err, stream.CodeSendStall)
			}
			// The socket buffers hold what was sent: a few MiB at most.
			if r.Sent > 1000 {
				t.Fatalf("%d messages of 64 KiB sent to a caller who reads none", r.Sent)
			}
		})
	}
}

// TestStreamClientBody: a client stream's NDJSON body is one message a
// line; a WebSocket's, one a message, ended by an empty one. A line that
// does not decode ends the stream with its VALIDATION outcome.
func TestStreamClientBody(t *testing.T) {
	sum := func(s *stream.Stream) error {
		total := 0
		for {
			m, err := s.Recv()
			if err == io.EOF {
				return s.Send(num{total}) // over WebSocket only; HTTP answers with the kernel's output
			}
			if err != nil {
				return err
			}
			total += m.(*num).N
		}
	}
	cfg := func() stream.Config { return stream.Config{Kind: stream.Client} }
	t.Run("ndjson", func(t *testing.T) {
		srv := newRawServer(t, stream.Client, cfg, 0, sum)
		resp, err := http.Post(srv.url, contentTypeNDJSON, strings.NewReader("{\"n\":1}\n\n{\"n\":2}\n{\"n\":3}"))
		if err != nil {
			t.Fatal(err)
		}
		// The caller reads the whole answer before it leaves: closing the
		// body unread closes the connection, which may end the stream as
		// the caller's leaving before the handler's return is counted.
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || !strings.HasPrefix(string(b), "{\"n\":6}\n{\"outcome\":") {
			t.Fatalf("body %q %v, want {\"n\":6} then the outcome", b, err)
		}
		if r := srv.result(t); r.Received != 3 || r.Sent != 1 || r.Err != nil {
			t.Fatalf("result %+v, want 3 received", r)
		}
		resp, err = http.Post(srv.url, contentTypeNDJSON, strings.NewReader("{\"n\":1}\nnot json\n"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if r := srv.result(t); r.Reason != stream.EndLimit || pipeline.AsError(r.Err).Code() != codeMalformedBody {
			t.Fatalf("result %v %v, want limit %s", r.Reason, r.Err, codeMalformedBody)
		}
		resp, err = http.Post(srv.url, contentTypeNDJSON, strings.NewReader(`{"n":1,"pad":"`+strings.Repeat("x", 2000)+`"}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if r := srv.result(t); r.Reason != stream.EndLimit || pipeline.AsError(r.Err).Code() != codeBodyTooLarge {
			t.Fatalf("result %v %v, want limit %s", r.Reason, r.Err, codeBodyTooLarge)
		}
	})
	t.Run("ws", func(t *testing.T) {
		srv := newRawServer(t, stream.Client, cfg, 0, sum)
		c := openStream(t, "ws", srv.url, nil, `{"n":1}`, `{"n":2}`, `{"n":3}`, ``)
		defer c.close()
		got, err := readAll(c)
		if err != nil {
			t.Fatal(err)
		}
		if len(got.msgs) != 1 || string(got.msgs[0]) != `{"n":6}` || got.close != websocket.StatusNormalClosure {
			t.Fatalf("got %s, close %d; want {\"n\":6} and 1000", got.msgs, got.close)
		}
		srv.result(t)
	})
}

// TestStreamAccept: Accept chooses SSE when it prefers text/event-stream
// to application/x-ndjson, q-values counted; NDJSON otherwise.
func TestStreamAccept(t *testing.T) {
	for accept, sse := range map[string]bool{
		"":                  false,
		"*/*":               false,
		"text/event-stream": true,
		"application/x-ndjson, text/event-stream;q=0.5": false,
		"application/x-ndjson;q=0.1, text/event-stream": true,
		"text/event-stream;q=0":                         false,
		"text/event-stream;q=x":                         false,
		"text/html, text/event-stream":                  true,
	} {
		if got := wantsSSE([]string{accept}); got != sse {
			t.Errorf("Accept %q: SSE %v, want %v", accept, got, sse)
		}
	}
}

// TestStreamWebSocketBounds: a caller's message over the limit closes
// the WebSocket with 1009 and ends the stream with HTTP_VALIDATION_003.
func TestStreamWebSocketBounds(t *testing.T) {
	cfg := func() stream.Config { return stream.Config{Kind: stream.Client} }
	srv := newRawServer(t, stream.Client, cfg, 0, func(s *stream.Stream) error {
		for {
			if _, err := s.Recv(); err != nil {
				return err
			}
		}
	})
	c := openStream(t, "ws", srv.url, nil, `{"n":1,"pad":"`+strings.Repeat("x", 2000)+`"}`)
	defer c.close()
	got, _ := readAll(c)
	if got.close != websocket.StatusMessageTooBig {
		t.Fatalf("close code %d, want 1009", got.close)
	}
	if r := srv.result(t); pipeline.AsError(r.Err).Code() != codeBodyTooLarge {
		t.Fatalf("result %v, want %s", r.Err, codeBodyTooLarge)
	}
}
