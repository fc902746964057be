package httpadapter

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

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
