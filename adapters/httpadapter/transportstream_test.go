package httpadapter_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sundial-go/sundial/adapters/httpadapter"
	"github.com/sundial-go/sundial/kernel/propagation"
	"github.com/sundial-go/sundial/pipeline"
	rstream "github.com/sundial-go/sundial/resilience/stream"
)

// heartbeatServer answers a stream of contentType: one message, then a
// heartbeat every 10 ms, until the caller leaves or the test ends.
func heartbeatServer(t *testing.T, contentType, message, heartbeat string) string {
	t.Helper()
	done := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", contentType)
		_, _ = io.WriteString(w, message)
		w.(http.Flusher).Flush()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-r.Context().Done():
				return
			case <-done:
				return
			case <-tick.C:
				if _, err := io.WriteString(w, heartbeat); err != nil {
					return
				}
				w.(http.Flusher).Flush()
			}
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(done) })
	return srv.URL
}

// streamClient returns a client of a Transport with opts.
func streamClient(t *testing.T, opts ...httpadapter.TransportOption) *http.Client {
	c := &http.Client{Transport: httpadapter.NewTransport(&http.Transport{}, opts...)}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

// TestTransportStreamIdle: with WithStreamClocks, a streamed response
// whose server sends only heartbeats after its first message (SSE
// comments, empty NDJSON lines) fails the body's read at the idle time
// with TIMEOUT KERNEL_TIMEOUT_003: heartbeats do not restart the clock.
func TestTransportStreamIdle(t *testing.T) {
	const idle = 200 * time.Millisecond
	for _, tc := range []struct{ name, accept, message, heartbeat string }{
		{"sse", "text/event-stream", "id: 1\nevent: message\ndata: {\"n\":1}\n\n", ":\n\n"},
		{"ndjson", "application/x-ndjson", "{\"n\":1}\n", "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := heartbeatServer(t, tc.accept, tc.message, tc.heartbeat)
			c := streamClient(t, httpadapter.WithStreamClocks(idle, 0))
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			req.Header.Set("Accept", tc.accept)
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			br := bufio.NewReader(resp.Body)
			if _, err := br.ReadString('}'); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			heartbeats := 0
			for err == nil {
				var b byte
				if b, err = br.ReadByte(); b == '\n' {
					heartbeats++
				}
			}
			e, ok := errors.AsType[*pipeline.Error](err)
			if !ok || e.Kind() != pipeline.KindTimeout || e.Code() != rstream.CodeIdle {
				t.Fatalf("read after the first message: %v, want TIMEOUT %s", err, rstream.CodeIdle)
			}
			if took := time.Since(start); took < idle || heartbeats < 4 {
				t.Fatalf("idle after %v and %d heartbeat bytes, want at least %v and some heartbeats", took, heartbeats, idle)
			}
		})
	}
}

// TestTransportStreamMessagesRestartIdle: messages that come more often
// than the idle time keep the stream open.
func TestTransportStreamMessagesRestartIdle(t *testing.T) {
	url := heartbeatServer(t, "application/x-ndjson", "", "{}\n")
	c := streamClient(t, httpadapter.WithStreamClocks(150*time.Millisecond, 0))
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	req.Header.Set("Accept", "application/x-ndjson")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	for deadline := time.Now().Add(600 * time.Millisecond); time.Now().Before(deadline); {
		if _, err := br.ReadString('\n'); err != nil {
			t.Fatalf("a stream of messages every 10 ms failed: %v", err)
		}
	}
}

// TestTransportStreamSendStall: with WithStreamClocks, a streamed request
// body that the server stops reading fails the call at the send stall
// with CANCELLED KERNEL_CANCELLED_002.
func TestTransportStreamSendStall(t *testing.T) {
	const stall = 200 * time.Millisecond
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		<-release // reads nothing
	}))
	defer srv.Close()
	defer close(release)
	c := streamClient(t, httpadapter.WithStreamClocks(0, stall))
	pr, pw := io.Pipe()
	go func() {
		line := []byte(strings.Repeat("x", 64<<10) + "\n")
		for {
			if _, err := pw.Write(line); err != nil {
				return
			}
		}
	}()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, pr)
	req.Header.Set("Content-Type", "application/x-ndjson")
	resp, err := c.Do(req)
	if err == nil {
		resp.Body.Close()
	}
	e, ok := errors.AsType[*pipeline.Error](err)
	if !ok || e.Kind() != pipeline.KindCanceled || e.Code() != rstream.CodeSendStall {
		t.Fatalf("upload to a server that reads nothing: %v, want CANCELLED %s", err, rstream.CodeSendStall)
	}
	pr.Close()
}

// TestTransportStreamDeadline: the caller's deadline ends a streamed
// response mid-stream; the body's read fails with an error that wraps
// context.DeadlineExceeded, with the clocks or without.
func TestTransportStreamDeadline(t *testing.T) {
	for _, opts := range [][]httpadapter.TransportOption{nil, {httpadapter.WithStreamClocks(time.Minute, time.Minute)}} {
		url := heartbeatServer(t, "text/event-stream", "data: {}\n\n", ":\n\n")
		c := streamClient(t, opts...)
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		req.Header.Set("Accept", "text/event-stream")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("clocks %v: read past the deadline: %v, want context.DeadlineExceeded", opts != nil, err)
		}
	}
}

// breakingStream serves an SSE stream that, on calls up to failBefore,
// breaks the connection after a heartbeat and before any message; on
// later calls, it sends one message, then breaks the connection when
// breakAfter is set, else a second message and the end.
type breakingStream struct {
	failBefore int32
	breakAfter bool
	calls      atomic.Int32
}

func (b *breakingStream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := b.calls.Add(1)
	w.Header().Set("Content-Type", "text/event-stream")
	if n <= b.failBefore {
		_, _ = io.WriteString(w, ":\n\n")
	} else {
		_, _ = io.WriteString(w, "id: 1\ndata: {\"n\":1}\n\n")
	}
	w.(http.Flusher).Flush()
	if n <= b.failBefore || b.breakAfter {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close() // the chunked body ends without its last chunk
		}
		return
	}
	_, _ = io.WriteString(w, "id: 2\ndata: {\"n\":2}\n\n")
}

// TestTransportStreamRetriedBeforeTheFirstMessage: through a dependency,
// a stream whose connection breaks before its first message is retried
// (the call carries an idempotency key); the caller reads the stream of
// the attempt that sent one, from its first byte.
func TestTransportStreamRetriedBeforeTheFirstMessage(t *testing.T) {
	b := &breakingStream{failBefore: 2}
	body, err := watchThrough(t, b)
	if err != nil || body != "id: 1\ndata: {\"n\":1}\n\nid: 2\ndata: {\"n\":2}\n\n" {
		t.Fatalf("body %q (%v), want both events", body, err)
	}
	if n := b.calls.Load(); n != 3 {
		t.Fatalf("%d attempts, want 3", n)
	}
}

// TestTransportStreamNotRetriedAfterTheFirstMessage: through a
// dependency, a stream whose connection breaks after its first message
// is not retried: the caller reads the message, then the failure.
func TestTransportStreamNotRetriedAfterTheFirstMessage(t *testing.T) {
	b := &breakingStream{breakAfter: true}
	body, err := watchThrough(t, b)
	if err == nil || body != "id: 1\ndata: {\"n\":1}\n\n" {
		t.Fatalf("body %q (%v), want the first event, then a failure", body, err)
	}
	if n := b.calls.Load(); n != 1 {
		t.Fatalf("%d attempts, want 1", n)
	}
}

// watchThrough reads an SSE stream of b through a dependency, with an
// idempotency key, and returns its body and the read's error.
func watchThrough(t *testing.T, b *breakingStream) (string, error) {
	t.Helper()
	srv := httptest.NewServer(b)
	defer srv.Close()
	c := dependencyClient(t, dependency(t, nil), nil)
	ctx, _ := propagation.WithIdempotencyKey(t.Context(), "watch-1")
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	return string(body), err
}
