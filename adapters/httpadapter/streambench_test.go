package httpadapter

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
)

type benchFeed struct {
	N int `query:"n" json:"n"`
}

// BenchmarkSSE measures messages a second of one server stream over SSE
// on loopback: through echo, the adapter and the kernel (sundial), and
// through a bare net/http handler that encodes, frames and flushes each
// message the same way (bare). One op is one message.
func BenchmarkSSE(b *testing.B) {
	reg := operations.NewRegistry()
	if err := operations.RegisterServerStream(reg, operations.Descriptor{ID: "bench.feed", Method: "GET", Path: "/feed"},
		func(_ context.Context, in benchFeed, s *operations.Sender[benchOut]) error {
			for i := range in.N {
				if err := s.Send(benchOut{ID: "ord-1", Amount: i}); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
		b.Fatal(err)
	}
	k, err := kernel.New(kernel.WithRegistry(reg))
	if err != nil {
		b.Fatal(err)
	}
	e := echo.New()
	if _, err := Mount(e, k); err != nil {
		b.Fatal(err)
	}
	bare := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		w.Header().Set("Content-Type", contentTypeSSE)
		w.WriteHeader(http.StatusOK)
		rc := http.NewResponseController(w)
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		for i := range n {
			buf.Reset()
			buf.WriteString("id: " + strconv.Itoa(i+1) + "\nevent: message\ndata: ")
			_ = enc.Encode(benchOut{ID: "ord-1", Amount: i})
			buf.WriteByte('\n')
			if _, err := w.Write(buf.Bytes()); err != nil || rc.Flush() != nil {
				return
			}
		}
		_, _ = w.Write([]byte("event: outcome\ndata: {}\n\n"))
	})
	for _, c := range []struct {
		name string
		h    http.Handler
	}{{"sundial", e}, {"bare", bare}} {
		b.Run(c.name, func(b *testing.B) {
			srv := httptest.NewServer(c.h)
			defer srv.Close()
			req, _ := http.NewRequest(http.MethodGet, srv.URL+"/feed?n="+strconv.Itoa(b.N), nil)
			req.Header.Set("Accept", contentTypeSSE)
			b.ReportAllocs()
			b.ResetTimer()
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			defer resp.Body.Close()
			sc := bufio.NewScanner(resp.Body)
			got := 0
			for sc.Scan() {
				if bytes.HasPrefix(sc.Bytes(), []byte("data: {\"id\"")) {
					got++
				}
			}
			b.StopTimer()
			if got != b.N {
				b.Fatalf("%d messages, want %d", got, b.N)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

// BenchmarkIdleStream measures what an idle SSE stream holds: heap and
// goroutine stacks in use, and goroutines, client and server together, as
// grpcadapter's BenchmarkIdleStream measures a gRPC stream. Each op opens
// 1,000 streams on loopback, each on a connection of its own, reads each
// one's first event, and closes them. The streams run through echo, the
// adapter and the kernel (sundial), or through a bare net/http handler
// that sends one event and waits for the caller to leave (bare).
func BenchmarkIdleStream(b *testing.B) {
	const streams = 1000
	reg := operations.NewRegistry()
	if err := operations.RegisterServerStream(reg, operations.Descriptor{ID: "bench.idle", Method: "GET", Path: "/feed"},
		func(ctx context.Context, _ benchFeed, s *operations.Sender[benchOut]) error {
			if err := s.Send(benchOut{ID: "ord-1"}); err != nil {
				return err
			}
			<-ctx.Done()
			return ctx.Err()
		}); err != nil {
		b.Fatal(err)
	}
	k, err := kernel.New(kernel.WithRegistry(reg))
	if err != nil {
		b.Fatal(err)
	}
	defer k.Close()
	e := echo.New()
	if _, err := Mount(e, k); err != nil {
		b.Fatal(err)
	}
	bare := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", contentTypeSSE)
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("id: 1\nevent: message\ndata: {\"id\":\"ord-1\"}\n\n"))
		_ = http.NewResponseController(w).Flush()
		<-r.Context().Done()
	})
	for _, c := range []struct {
		name string
		h    http.Handler
	}{{"sundial", e}, {"bare", bare}} {
		b.Run(c.name, func(b *testing.B) {
			srv := httptest.NewServer(c.h)
			defer srv.Close()
			var bytes, goroutines, rss float64
			for b.Loop() {
				tr := &http.Transport{}
				client := &http.Client{Transport: tr}
				ctx, cancel := context.WithCancel(context.Background())
				before, g0, rss0 := heapAndStacks(), runtime.NumGoroutine(), residentBytes()
				for range streams {
					openIdleSSE(ctx, b, client, srv.URL+"/feed")
				}
				bytes += float64(heapAndStacks()-before) / streams
				rss += float64(residentBytes()-rss0) / streams
				goroutines += float64(runtime.NumGoroutine()-g0) / streams
				cancel()
				tr.CloseIdleConnections()
				for end := time.Now().Add(10 * time.Second); runtime.NumGoroutine() > g0 && time.Now().Before(end); {
					time.Sleep(time.Millisecond)
				}
			}
			b.ReportMetric(bytes/float64(b.N), "bytes/stream")
			b.ReportMetric(goroutines/float64(b.N), "goroutines/stream")
			b.ReportMetric(rss/float64(b.N), "rss-bytes/stream")
		})
	}
}

// residentBytes returns the process's resident memory (VmRSS, Linux), or
// 0 where /proc is missing. Memory freed stays resident: only the first
// op of a process's first benchmark reads the growth alone (-benchtime 1x,
// one side a process).
func residentBytes() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	_, rest, _ := strings.Cut(string(b), "VmRSS:")
	var kb int64
	_, _ = fmt.Sscan(rest, &kb)
	return kb << 10
}

// openIdleSSE opens an SSE stream at url and reads up to its first event.
// The stream stays open until ctx ends.
func openIdleSSE(ctx context.Context, b *testing.B, client *http.Client, url string) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	req.Header.Set("Accept", contentTypeSSE)
	resp, err := client.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		b.Fatalf("status %d", resp.StatusCode)
	}
	r := bufio.NewReader(resp.Body)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			b.Fatal(err)
		}
		if strings.HasPrefix(line, "data: ") {
			return
		}
	}
}

// heapAndStacks returns the bytes of heap and goroutine stacks in use,
// after a collection.
func heapAndStacks() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapInuse + ms.StackInuse)
}
