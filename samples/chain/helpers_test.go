package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sundial-go/sundial/adapters/httpadapter"
)

// startCluster starts the four roles on 127.0.0.1 for one test and stops
// them when it ends. logs, if not nil, receives every role's log records.
func startCluster(t *testing.T, cfg ClusterConfig, logs *logBuffer) *Cluster {
	t.Helper()
	if logs != nil {
		cfg.Logger = func(role string) *slog.Logger { return logs.logger().With("role", role) }
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

// call makes one HTTP request with the given headers and measures how long
// it took, from just before sending to the end of the body.
func call(ctx context.Context, method, url, body string, headers map[string]string) reply {
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
	tr := &http.Transport{DisableKeepAlives: true}
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
	return map[string]string{httpadapter.HeaderDeadline: httpadapter.FormatDeadline(time.Now().Add(d))}
}

// within fails the test unless lo <= got <= hi, and logs the figure either
// way: the experiments' output is their measured numbers.
func within(t *testing.T, what string, got, lo, hi time.Duration) {
	t.Helper()
	if got < lo || got > hi {
		t.Errorf("%s = %v, want between %v and %v", what, got.Round(time.Millisecond), lo, hi)
		return
	}
	t.Logf("%s: %v (bound %v to %v)", what, got.Round(time.Millisecond), lo, hi)
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

// logBuffer collects JSON log records from several goroutines and lets a
// test wait for one.
type logBuffer struct {
	mu      sync.Mutex // guards buf and waiters
	buf     bytes.Buffer
	waiters []chan struct{}
}

func (b *logBuffer) Write(p []byte) (int, error) {
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
func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitWrite waits up to limit for the next write.
func (b *logBuffer) waitWrite(limit time.Duration) {
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

func (b *logBuffer) logger() *slog.Logger { return slog.New(slog.NewJSONHandler(b, nil)) }

// records returns the records logged so far whose attributes include every
// key/value in match.
func (b *logBuffer) records(match map[string]any) []map[string]any {
	b.mu.Lock()
	data := append([]byte(nil), b.buf.Bytes()...)
	b.mu.Unlock()
	var out []map[string]any
	for line := range bytes.SplitSeq(data, []byte("\n")) {
		var rec map[string]any
		if json.Unmarshal(line, &rec) != nil {
			continue
		}
		ok := true
		for k, v := range match {
			if rec[k] != v {
				ok = false
				break
			}
		}
		if ok {
			out = append(out, rec)
		}
	}
	return out
}

// wait returns the first record matching match, waiting up to limit for it.
func (b *logBuffer) wait(t *testing.T, match map[string]any, limit time.Duration) map[string]any {
	t.Helper()
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	for {
		b.mu.Lock()
		w := make(chan struct{})
		b.waiters = append(b.waiters, w)
		b.mu.Unlock()
		if recs := b.records(match); len(recs) > 0 {
			return recs[0]
		}
		select {
		case <-w:
		case <-deadline.C:
			t.Fatalf("no log record matching %v within %v", match, limit)
			return nil
		}
	}
}
