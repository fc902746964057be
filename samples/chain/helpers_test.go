package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sundial-go/sundial/adapters/httpadapter"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
	"github.com/sundial-go/sundial/samples/internal/pipenet"
)

// startCluster starts the four roles on 127.0.0.1 for one test and stops
// them when it ends. logs, if not nil, receives every role's log records,
// each with a "role" attribute.
func startCluster(t *testing.T, cfg ClusterConfig, logs *pipelinetest.LogSink) *Cluster {
	t.Helper()
	if logs != nil {
		cfg.Logger = func(role string) *slog.Logger { return logs.Logger().With("role", role) }
	}
	c, err := StartCluster(cfg)
	if err != nil {
		t.Fatalf("StartCluster: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.Close(ctx); err != nil {
			t.Errorf("Cluster.Close: %v", err)
		}
	})
	return c
}

// reply is what a test client saw of one HTTP call.
type reply struct {
	Status  int
	Body    []byte
	Problem httpadapter.Problem // for failures
	Elapsed time.Duration
	Err     error // transport error (the request never got an answer)
}

// pipeNetwork is an in-memory Network: a role listens at "<role>:80".
// A cluster on it runs inside a testing/synctest bubble.
type pipeNetwork struct{ n pipenet.Network }

func (p *pipeNetwork) Listen(role string) (net.Listener, error) { return p.n.Listen(role + ":80") }

func (p *pipeNetwork) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	return p.n.DialContext(ctx, network, addr)
}

// startBubbleCluster starts the four roles on an in-memory network, for a
// test inside a synctest bubble, and stops them when it ends. Reach them
// with the cluster's call.
func startBubbleCluster(t *testing.T, cfg ClusterConfig, logs *pipelinetest.LogSink) *Cluster {
	t.Helper()
	// Last: the goroutines that outlive a call by a timer of their own (a
	// gRPC receiver waiting for another message) end before the bubble
	// does; virtual time moves only while every goroutine waits.
	t.Cleanup(func() { time.Sleep(time.Minute) })
	cfg.Network = new(pipeNetwork)
	return startCluster(t, cfg, logs)
}

// call is the package's call, over the cluster's network.
func (c *Cluster) call(ctx context.Context, method, url, body string, headers map[string]string) reply {
	var dial dialFunc
	if c.network != nil {
		dial = c.network.DialContext
	}
	return callVia(dial, ctx, method, url, body, headers)
}

// call makes one HTTP request with the given headers and measures how long
// it took, from just before sending to the end of the body.
func call(ctx context.Context, method, url, body string, headers map[string]string) reply {
	return callVia(nil, ctx, method, url, body, headers)
}

// callVia is call, connecting with dial when it is set.
func callVia(dial dialFunc, ctx context.Context, method, url, body string, headers map[string]string) reply {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return reply{Err: err}
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	tr := &http.Transport{DisableKeepAlives: true, DialContext: dial}
	defer tr.CloseIdleConnections()
	start := time.Now()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return reply{Err: err, Elapsed: time.Since(start)}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	r := reply{Status: resp.StatusCode, Body: b, Elapsed: time.Since(start), Err: err}
	if resp.StatusCode >= 300 {
		_ = json.Unmarshal(b, &r.Problem)
	}
	return r
}

// deadlineIn returns the Sundial-Deadline header for a deadline d from now.
func deadlineIn(d time.Duration) map[string]string {
	return map[string]string{httpadapter.HeaderDeadline: time.Now().Add(d).UTC().Format("2006-01-02T15:04:05.000Z")}
}

// exactly fails the test unless got is want, and logs the figure: in a
// synctest bubble, time moves only by the timers of the code under test.
func exactly(t *testing.T, what string, got, want time.Duration) {
	t.Helper()
	if got != want {
		t.Errorf("%s = %v, want exactly %v", what, got, want)
		return
	}
	t.Logf("%s: %v", what, got)
}

// secs formats a duration as seconds with two decimals: "1.50 s".
func secs(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }

// waitEvents waits up to limit for n events of any of the kinds in j.
func waitEvents(t *testing.T, j *Journal, n int, limit time.Duration, kinds ...string) []Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	evs, err := j.Wait(ctx, n, kinds...)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// waitLog returns the first record logged to logs with message msg and
// every attribute in attrs, waiting up to limit for one. Attribute values
// are as pipelinetest.Record holds them: an slog.Int is an int64.
func waitLog(t *testing.T, logs *pipelinetest.LogSink, msg string, attrs map[string]any, limit time.Duration) pipelinetest.Record {
	t.Helper()
	rec, ok := logs.WaitFor(limit, func(r pipelinetest.Record) bool {
		if r.Message != msg {
			return false
		}
		for k, v := range attrs {
			if r.Attrs[k] != v {
				return false
			}
		}
		return true
	})
	if !ok {
		t.Fatalf("no log record %q with %v within %v", msg, attrs, limit)
	}
	return rec
}

// outputBuffer collects what a command writes to its standard output or
// error from several goroutines and lets a test wait for the next write.
type outputBuffer struct {
	mu      sync.Mutex // guards buf and waiters
	buf     bytes.Buffer
	waiters []chan struct{}
}

func (b *outputBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	n, err := b.buf.Write(p)
	ws := b.waiters
	b.waiters = nil
	b.mu.Unlock()
	for _, w := range ws {
		close(w)
	}
	return n, err
}

// String returns everything written so far.
func (b *outputBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitWrite waits up to limit for the next write.
func (b *outputBuffer) waitWrite(limit time.Duration) {
	b.mu.Lock()
	w := make(chan struct{})
	b.waiters = append(b.waiters, w)
	b.mu.Unlock()
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case <-w:
	case <-t.C:
	}
}

// stopOnCleanup stops srv when the test ends, within 10 s.
func stopOnCleanup(t testing.TB, srv *server) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.stop(ctx); err != nil {
			t.Errorf("stop %s: %v", srv.name, err)
		}
	})
}
