package httpadapter

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// This file has the test clients of a stream: SSE, NDJSON and WebSocket,
// each reading messages until the outcome.

// received is what a stream client read: the messages, the SSE ids, the
// outcome, and the WebSocket close code.
type received struct {
	msgs       []json.RawMessage
	ids        []string
	heartbeats int
	outcome    *Problem
	retry      string // SSE's retry field of the outcome
	close      websocket.StatusCode
}

// streamClient reads one stream.
type streamClient interface {
	// next reads one message: the outcome sets r.outcome. It returns
	// io.EOF when the stream ended.
	next(r *received) error
	close()
}

// sseClient reads a text/event-stream response.
type sseClient struct {
	resp *http.Response
	br   *bufio.Reader
}

func (c *sseClient) next(r *received) error {
	var id, event, data, retry string
	for {
		line, err := c.br.ReadString('\n')
		if err != nil {
			return err
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			if event == "" && data == "" {
				continue
			}
			if event == "outcome" {
				r.outcome, r.retry = new(Problem), retry
				return json.Unmarshal([]byte(data), r.outcome)
			}
			if event != "message" {
				return fmt.Errorf("event %q, want message or outcome", event)
			}
			r.msgs, r.ids = append(r.msgs, json.RawMessage(data)), append(r.ids, id)
			return nil
		case strings.HasPrefix(line, ":"):
			r.heartbeats++
		default:
			name, value, _ := strings.Cut(line, ": ")
			switch name {
			case "id":
				id = value
			case "event":
				event = value
			case "data":
				data += value
			case "retry":
				retry = value
			default:
				return fmt.Errorf("unknown SSE line %q", line)
			}
		}
	}
}

func (c *sseClient) close() { c.resp.Body.Close() }

// ndjsonClient reads an application/x-ndjson response.
type ndjsonClient struct {
	resp *http.Response
	br   *bufio.Reader
}

func (c *ndjsonClient) next(r *received) error {
	for {
		line, err := c.br.ReadBytes('\n')
		if err != nil {
			return err
		}
		if len(line) == 1 {
			r.heartbeats++
			continue
		}
		return decodeLine(line, r)
	}
}

// decodeLine decodes an NDJSON line or a WebSocket message: a message,
// or the last, {"outcome": ...}.
func decodeLine(line []byte, r *received) error {
	line = bytes.TrimSuffix(line, []byte("\n"))
	var probe struct {
		Outcome *Problem `json:"outcome"`
	}
	if json.Unmarshal(line, &probe) == nil && probe.Outcome != nil {
		r.outcome = probe.Outcome
		return nil
	}
	r.msgs = append(r.msgs, json.RawMessage(line))
	return nil
}

func (c *ndjsonClient) close() { c.resp.Body.Close() }

// wsClient reads a WebSocket.
type wsClient struct {
	ctx   context.Context // its reads end with it
	conn  *websocket.Conn
	pings atomic.Int64 // the server's pings, answered as the client reads
}

func (c *wsClient) next(r *received) error {
	_, data, err := c.conn.Read(c.ctx)
	r.heartbeats = int(c.pings.Load())
	if err != nil {
		if s := websocket.CloseStatus(err); s != -1 {
			r.close = s
			return io.EOF
		}
		return err
	}
	return decodeLine(data, r)
}

func (c *wsClient) close() { _ = c.conn.CloseNow() }

// openStream opens a stream at url over transport ("sse", "ndjson",
// "ws"). A WebSocket client sends first, each as one message.
func openStream(t *testing.T, transport, url string, header http.Header, first ...string) streamClient {
	t.Helper()
	return openStreamContext(context.Background(), t, transport, url, header, first...)
}

// openStreamContext is openStream whose stream ends with ctx: once ctx
// has ended, the stream's opening and its reads fail.
func openStreamContext(ctx context.Context, t *testing.T, transport, url string, header http.Header, first ...string) streamClient {
	t.Helper()
	if transport == "ws" {
		dial, cancel := context.WithTimeout(ctx, 30*time.Second) // the handshake and the first messages
		defer cancel()
		c := &wsClient{ctx: ctx}
		conn, _, err := websocket.Dial(dial, strings.Replace(url, "http:", "ws:", 1),
			&websocket.DialOptions{HTTPHeader: header, OnPingReceived: func(context.Context, []byte) bool {
				c.pings.Add(1)
				return true
			}})
		if err != nil {
			t.Fatalf("dial %s: %v", url, err)
		}
		c.conn = conn
		for _, m := range first {
			if err := conn.Write(dial, websocket.MessageText, []byte(m)); err != nil {
				t.Fatalf("write %q: %v", m, err)
			}
		}
		return c
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if transport == "sse" {
		req.Header.Set("Accept", contentTypeSSE)
	} else {
		req.Header.Set("Accept", contentTypeNDJSON)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	br := bufio.NewReader(resp.Body)
	if transport == "sse" {
		return &sseClient{resp: resp, br: br}
	}
	return &ndjsonClient{resp: resp, br: br}
}

// readAll reads c until its outcome and the end of the stream.
func readAll(c streamClient) (*received, error) {
	r := &received{}
	for {
		err := c.next(r)
		if errors.Is(err, io.EOF) {
			return r, nil
		}
		if err != nil {
			return r, err
		}
	}
}
