package grpcadapter_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/sundial-go/sundial/adapters/grpcadapter"
)

// streamCounter is a stats handler counting the streams the server has
// accepted and not yet finished.
type streamCounter struct{ active, peak atomic.Int64 }

func (c *streamCounter) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (c *streamCounter) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}
func (c *streamCounter) HandleConn(context.Context, stats.ConnStats) {}
func (c *streamCounter) HandleRPC(_ context.Context, s stats.RPCStats) {
	switch s.(type) {
	case *stats.Begin:
		n := c.active.Add(1)
		for p := c.peak.Load(); n > p && !c.peak.CompareAndSwap(p, n); p = c.peak.Load() {
		}
	case *stats.End:
		c.active.Add(-1)
	}
}

// serverGoroutines counts the goroutines running grpc-go's server or the
// adapter (the client's are left out: both run in the test process).
func serverGoroutines() int {
	var b bytes.Buffer
	_ = pprof.Lookup("goroutine").WriteTo(&b, 2)
	n := 0
	for _, g := range strings.Split(b.String(), "\n\n") {
		if strings.Contains(g, "grpc.(*Server)") || strings.Contains(g, "transport.(*http2Server)") ||
			strings.Contains(g, "grpcadapter.") || strings.Contains(g, "transport.NewServerTransport") {
			n++
		}
	}
	return n
}

// waitFor waits until cond holds. Its limit only stops a test that would
// hang: it asserts no speed (100 calls with 60 KiB of metadata each, with
// the race detector on a loaded machine, took more than 10 s).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestServerOptionsBoundStalledStreams opens 400 calls on one TCP
// connection that send their headers and never their message. Under
// grpc-go's defaults the server accepts all 400; with ServerOptions it
// holds 256, the client queues the rest, and the server's goroutines stay
// bounded accordingly.
func TestServerOptionsBoundStalledStreams(t *testing.T) {
	const streams = 400
	for _, tc := range []struct {
		name  string
		sopts []grpc.ServerOption
		want  int64
	}{
		{"grpc-go defaults", nil, streams},
		{"ServerOptions", grpcadapter.DefaultBounds().ServerOptions(), grpcadapter.DefaultMaxConcurrentStreams},
	} {
		t.Run(tc.name, func(t *testing.T) {
			counter := &streamCounter{}
			h := newHarness(t, harnessOpt{
				tcp:     true,
				server:  append(tc.sopts, grpc.StatsHandler(counter)),
				adapter: []grpcadapter.Option{grpcadapter.WithRecvTimeout(time.Minute)}, // stalled for the test's length
			})
			// Connect and settle before the baseline.
			if _, st := h.call(t.Context(), t, "/test.v1.Work/Tiny", `{}`); st != nil {
				t.Fatal(st)
			}
			base := serverGoroutines()
			ctx, cancel := context.WithCancel(t.Context())
			var wg sync.WaitGroup
			var opened atomic.Int64
			for range streams {
				wg.Go(func() {
					s, err := h.conn.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, "/test.v1.Work/Run")
					if err != nil {
						return // cancelled while queued
					}
					opened.Add(1)
					<-ctx.Done()
					_ = s.CloseSend()
				})
			}
			waitFor(t, "the server to accept the streams", func() bool { return counter.active.Load() >= tc.want })
			time.Sleep(300 * time.Millisecond) // would more get in?
			held, peak, g := counter.active.Load(), counter.peak.Load(), serverGoroutines()
			t.Logf("%s: %d stalled calls on one connection: server holds %d (peak %d), client opened %d, queued %d; server goroutines %d → %d (+%d)",
				tc.name, streams, held, peak, opened.Load(), streams-opened.Load(), base, g, g-base)
			if peak != tc.want || held != tc.want {
				t.Errorf("server held %d streams (peak %d), want %d", held, peak, tc.want)
			}
			if limit := int(tc.want)*3 + 10; g-base > limit {
				t.Errorf("server goroutines grew by %d, want at most %d", g-base, limit)
			}
			cancel()
			wg.Wait()
			waitFor(t, "the stalled streams to end", func() bool { return counter.active.Load() == 0 })
			t.Logf("%s: after cancelling, server goroutines %d (baseline %d)", tc.name, serverGoroutines(), base)
			if _, st := h.call(t.Context(), t, "/test.v1.Work/Tiny", `{}`); st != nil {
				t.Fatalf("after the stall: %v", st)
			}
		})
	}
}

// TestRecvTimeoutAnswersStalledRequest: a call whose message never comes
// is answered DeadlineExceeded / KERNEL_TIMEOUT_001 at WithRecvTimeout,
// while the client still holds the stream open.
func TestRecvTimeoutAnswersStalledRequest(t *testing.T) {
	const bound = 200 * time.Millisecond
	h := newHarness(t, harnessOpt{
		tcp:     true,
		server:  grpcadapter.DefaultBounds().ServerOptions(),
		adapter: []grpcadapter.Option{grpcadapter.WithRecvTimeout(bound)},
	})
	s, err := h.conn.NewStream(t.Context(), &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, "/test.v1.Work/Run")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var out struct{}
	err = s.RecvMsg(&out) // never sent a message; the server answers
	took := time.Since(start)
	st := status.Convert(err)
	t.Logf("stalled request answered after %v: %v", took.Round(time.Millisecond), st)
	if st.Code() != codes.DeadlineExceeded || errorInfo(t, st).GetReason() != "KERNEL_TIMEOUT_001" {
		t.Fatalf("status %v, want DeadlineExceeded / KERNEL_TIMEOUT_001", st)
	}
	if took < bound || took > bound+2*time.Second {
		t.Errorf("answered after %v, want about %v", took, bound)
	}
	if _, st := h.call(t.Context(), t, "/test.v1.Work/Tiny", `{"n":1}`); st != nil {
		t.Fatalf("a normal call after the stall: %v", st)
	}
}

// TestServerOptionsRefuseLargeMetadata: metadata over the header list
// size is refused — by grpc-go's client, which obeys the SETTINGS, and by
// the server for a raw HTTP/2 client that ignores them — and the server
// goes on serving.
func TestServerOptionsRefuseLargeMetadata(t *testing.T) {
	h := newHarness(t, harnessOpt{tcp: true, server: grpcadapter.DefaultBounds().ServerOptions()})
	if _, st := h.call(t.Context(), t, "/test.v1.Work/Tiny", `{}`); st != nil {
		t.Fatal(st)
	}
	big := strings.Repeat("x", 100<<10)
	ctx := metadata.AppendToOutgoingContext(t.Context(), "x-big", big)
	_, st := h.call(ctx, t, "/test.v1.Work/Tiny", `{}`)
	t.Logf("grpc-go client, 100 KiB of metadata: %v", st)
	if st == nil {
		t.Fatal("a call with 100 KiB of metadata succeeded")
	}

	// A raw client sends 1 MiB of headers anyway.
	conn, err := net.DialTimeout("tcp", h.addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range []hpack.HeaderField{
		{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"},
		{Name: ":path", Value: "/test.v1.Work/Tiny"}, {Name: ":authority", Value: h.addr},
		{Name: "content-type", Value: "application/grpc"}, {Name: "te", Value: "trailers"},
	} {
		_ = enc.WriteField(f)
	}
	for i := range 128 { // 128 × 8 KiB, each value distinct (no HPACK indexing)
		_ = enc.WriteField(hpack.HeaderField{Name: fmt.Sprintf("x-big-%03d", i), Value: strings.Repeat(string(rune('a'+i%26)), 8<<10)})
	}
	block := hb.Bytes()
	const frag = 16 << 10
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block[:frag], EndStream: true}); err != nil {
		t.Fatal(err)
	}
	closed := false // the server closed the connection while we wrote
	for rest := block[frag:]; len(rest) > 0 && !closed; {
		n := min(frag, len(rest))
		if err := fr.WriteContinuation(1, n == len(rest), rest[:n]); err != nil {
			if errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
				// The server refused the headers before they were all
				// sent: it closed the connection while we wrote.
				t.Logf("raw client, %d of %d bytes of headers sent: server closed the connection (%v)", len(block)-len(rest), len(block), err)
				closed = true
				break
			}
			t.Fatal(err)
		}
		rest = rest[n:]
	}
	sent := len(block)
	for !closed {
		f, err := fr.ReadFrame()
		if errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) {
			t.Logf("raw client, %d bytes of headers: server closed the connection (%v)", sent, err)
			break
		}
		if err != nil {
			t.Fatalf("reading the server's answer: %v", err)
		}
		if rst, ok := f.(*http2.RSTStreamFrame); ok && rst.StreamID == 1 {
			t.Logf("raw client, %d bytes of headers: server reset the stream (%v)", sent, rst.ErrCode)
			break
		}
		if ga, ok := f.(*http2.GoAwayFrame); ok {
			t.Logf("raw client, %d bytes of headers: server sent GOAWAY (%v)", sent, ga.ErrCode)
			break
		}
		if hf, ok := f.(*http2.HeadersFrame); ok && hf.StreamID == 1 {
			t.Fatalf("the server answered the oversized call with headers")
		}
	}
	if _, st := h.call(t.Context(), t, "/test.v1.Work/Tiny", `{}`); st != nil {
		t.Fatalf("after the metadata flood: %v", st)
	}
}

// TestServerOptionsValues pins the recommended values and the overrides.
func TestServerOptionsValues(t *testing.T) {
	b := grpcadapter.DefaultBounds()
	if b.MaxConcurrentStreams != 256 || b.MaxHeaderListSize != 64<<10 || b.MaxRecvMsgSize != 1<<20 ||
		b.ConnectionTimeout != 5*time.Second || b.Enforcement.MinTime != 10*time.Second || b.Enforcement.PermitWithoutStream ||
		b.Keepalive.MaxConnectionIdle != 2*time.Minute || b.Keepalive.MaxConnectionAge != 30*time.Minute ||
		b.Keepalive.MaxConnectionAgeGrace != 30*time.Second || b.Keepalive.Time != time.Minute || b.Keepalive.Timeout != 20*time.Second {
		t.Errorf("DefaultBounds() = %+v", b)
	}
	// A client may reset every call it may hold at once, and no more.
	if b.ResetBurst != 256 || b.ResetBurst != int(b.MaxConcurrentStreams) || b.ResetRate != 256 || b.MaxConnections != 1024 {
		t.Errorf("DefaultBounds() resets %d, %g/s, connections %d; want 256 (MaxConcurrentStreams), 256/s, 1024",
			b.ResetBurst, b.ResetRate, b.MaxConnections)
	}
	if n := len(grpcadapter.DefaultBounds().ServerOptions()); n != 7 {
		t.Errorf("ServerOptions() gave %d options, want 7", n)
	}
	b.MaxConcurrentStreams, b.Keepalive = 0, keepalive.ServerParameters{}
	n := len(b.ServerOptions())
	if n != 5 {
		t.Errorf("ServerOptions with two bounds zeroed gave %d options, want 5", n)
	}
	b.ResetBurst, b.MaxConnections = 0, 0
	if n := len(b.ServerOptions()); n != 4 {
		t.Errorf("ServerOptions with the connection guard's bounds zeroed too gave %d options, want 4", n)
	}
}

// TestServerOptionsRecvMsgSize: a request message over 1 MiB is refused
// with ResourceExhausted, as the HTTP adapter refuses a body over its limit.
func TestServerOptionsRecvMsgSize(t *testing.T) {
	h := newHarness(t, harnessOpt{tcp: true, server: grpcadapter.DefaultBounds().ServerOptions()})
	big := strings.Repeat("z", 1<<20+1)
	_, st := h.call(t.Context(), t, "/test.v1.Work/Fail", `{"message":"`+big+`"}`)
	if st == nil || st.Code() != codes.ResourceExhausted {
		t.Fatalf("a 1 MiB+ message: %v, want ResourceExhausted", st)
	}
}

// TestServerOptionsBoundMetadataFlood: 100 calls on one connection that
// send their metadata and never their message. Under grpc-go's defaults
// (a 16 MiB header list) 100 such calls with 8 MiB of metadata each hold
// 924 MB. With ServerOptions a call with 8 MiB of metadata is refused
// before it is sent, and 100 stalled calls with as much as the 64 KiB
// bound allows hold a few megabytes, returned once they end.
func TestServerOptionsBoundMetadataFlood(t *testing.T) {
	const (
		calls   = 100
		perCall = 60 << 10 // just under DefaultMaxHeaderListSize (64 KiB), with the call's own headers
	)
	counter := &streamCounter{}
	h := newHarness(t, harnessOpt{
		tcp:     true,
		server:  append(grpcadapter.DefaultBounds().ServerOptions(), grpc.StatsHandler(counter)),
		adapter: []grpcadapter.Option{grpcadapter.WithRecvTimeout(time.Minute)}, // stalled for the test's length
	})
	if _, st := h.call(t.Context(), t, "/test.v1.Work/Tiny", `{}`); st != nil {
		t.Fatal(st)
	}
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapInuse
	}

	// 8 MiB of metadata: refused, nothing held.
	big := metadata.AppendToOutgoingContext(t.Context(), "x-big", strings.Repeat("x", 8<<20))
	refused := 0
	for range calls {
		s, err := h.conn.NewStream(big, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, "/test.v1.Work/Run")
		if err == nil {
			err = s.RecvMsg(new(emptypb.Empty))
		}
		if status.Code(err) != codes.OK {
			refused++
		}
	}
	if refused != calls || counter.peak.Load() != 1 {
		t.Fatalf("%d of %d calls with 8 MiB of metadata refused, the server saw %d calls at most; want all refused, none held", refused, calls, counter.peak.Load())
	}

	// As much as the bound allows, stalled: held, and bounded.
	before := heap()
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	for i := range calls {
		// Distinct values, so that neither side can share one string.
		md := metadata.AppendToOutgoingContext(ctx, "x-fill", strings.Repeat(string(rune('a'+i%26)), perCall-8)+fmt.Sprintf("%08d", i))
		wg.Go(func() {
			s, err := h.conn.NewStream(md, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, "/test.v1.Work/Run")
			if err != nil {
				return
			}
			<-ctx.Done()
			_ = s.CloseSend()
		})
	}
	waitFor(t, "the server to accept the calls", func() bool { return counter.active.Load() >= calls })
	held := heap()
	cancel()
	wg.Wait()
	waitFor(t, "the stalled calls to end", func() bool { return counter.active.Load() == 0 })
	after := heap()
	grew := int64(held) - int64(before)
	t.Logf("metadata flood on one connection: %d calls with 8 MiB each refused (the server saw none); %d stalled calls with %d KiB each held, heap in use %.1f → %.1f MiB (+%.1f MiB, %.0f KiB a call), %.1f MiB after they ended",
		refused, calls, perCall>>10, float64(before)/(1<<20), float64(held)/(1<<20), float64(grew)/(1<<20), float64(grew)/calls/1024, float64(after)/(1<<20))
	// Client and server run in this process: each call's metadata is held
	// by both, a few times over (encoded, decoded). 100 × 8 MiB held 924 MB.
	if limit := int64(calls * perCall * 8); grew > limit {
		t.Errorf("heap grew by %.1f MiB with %d stalled calls, want at most %.1f MiB", float64(grew)/(1<<20), calls, float64(limit)/(1<<20))
	}
}
