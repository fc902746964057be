package grpcadapter_test

import (
	"bufio"
	"bytes"
	"context"
	"net"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/sundial-go/sundial/adapters/grpcadapter"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
)

// counterValue returns the sum of the int64 counter name's points whose
// attributes include attr (an empty attr: every point).
func counterValue(t *testing.T, r *sdkmetric.ManualReader, name string, attr ...attribute.KeyValue) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			sum, ok := m.Data.(metricdata.Sum[int64])
			if m.Name != name || !ok {
				continue
			}
			for _, p := range sum.DataPoints {
				has := true
				for _, a := range attr {
					if v, ok := p.Attributes.Value(a.Key); !ok || v != a.Value {
						has = false
					}
				}
				if has {
					n += p.Value
				}
			}
		}
	}
	return n
}

// guardedHarness serves with b's listener bounds, its guard logging to the
// harness's log and counting on reader's provider, as the kernel does.
func guardedHarness(t *testing.T, b grpcadapter.Bounds, opts ...grpcadapter.Option) (*harness, *sdkmetric.ManualReader) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	logs := new(pipelinetest.LogSink)
	b.MeterProvider, b.Logger = mp, logs.Logger()
	h := newHarness(t, harnessOpt{
		tcp:     true,
		logs:    logs,
		kernel:  []kernel.Option{kernel.WithMeterProvider(mp)},
		adapter: opts,
		server:  b.ServerOptions(),
	})
	return h, reader
}

// rawClient is an HTTP/2 client that writes frames as it likes.
type rawClient struct {
	conn net.Conn
	bw   *bufio.Writer
	fr   *http2.Framer
	hdr  []byte // the HPACK block of a call's headers
}

func dialRaw(t *testing.T, addr, method string) *rawClient {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	c := &rawClient{conn: conn, bw: bufio.NewWriterSize(conn, 64<<10)}
	c.fr = http2.NewFramer(c.bw, conn)
	if _, err := c.bw.WriteString(http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := c.fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range []hpack.HeaderField{
		{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"},
		{Name: ":path", Value: method}, {Name: ":authority", Value: addr},
		{Name: "content-type", Value: "application/grpc"}, {Name: "te", Value: "trailers"},
	} {
		_ = enc.WriteField(f)
	}
	c.hdr = hb.Bytes()
	return c
}

// openAndReset opens stream id (headers, no message) and resets it.
func (c *rawClient) openAndReset(id uint32) error {
	if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.hdr, EndHeaders: true}); err != nil {
		return err
	}
	return c.fr.WriteRSTStream(id, http2.ErrCodeCancel)
}

// goAway reads the server's frames until a GOAWAY or the end of the
// connection, and returns the GOAWAY (nil: none came).
func (c *rawClient) goAway() *http2.GoAwayFrame {
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			return nil
		}
		if ga, ok := f.(*http2.GoAwayFrame); ok {
			return ga
		}
	}
}

// TestRapidResetGetsGoAway: a raw HTTP/2 client opens and resets 100,000
// streams on one connection as fast as it can. The server closes the
// connection with GOAWAY ENHANCE_YOUR_CALM after 16 resets, once it holds
// a stream back and finds it reset; far fewer than ResetBurst streams
// reach grpc-go. The reset calls run no invocation and leave no call log
// record, only a count; the guard logs the closed connection once and
// counts it. The server goes on serving other connections.
func TestRapidResetGetsGoAway(t *testing.T) {
	const streams = 100_000
	b := grpcadapter.DefaultBounds()
	h, reader := guardedHarness(t, b)
	if _, st := h.call(t.Context(), t, "/test.v1.Work/Tiny", `{}`); st != nil {
		t.Fatal(st)
	}
	before := len(h.logs.Records())

	c := dialRaw(t, h.addr, "/test.v1.Work/Tiny")
	got := make(chan *http2.GoAwayFrame, 1)
	go func() { got <- c.goAway() }()
	start := time.Now()
	sent := 0
	for i := range streams {
		if err := c.openAndReset(uint32(2*i + 1)); err != nil {
			break
		}
		sent++
		if sent%256 == 0 && c.bw.Flush() != nil {
			break
		}
	}
	_ = c.bw.Flush()
	ga := <-got
	took := time.Since(start)
	if ga == nil {
		t.Fatalf("%d streams opened and reset in %v: the connection ended without GOAWAY", sent, took)
	}
	resets := int(ga.LastStreamID+1) / 2
	t.Logf("%d streams opened and reset in %v; GOAWAY %v %q after stream %d (%d resets)",
		sent, took.Round(time.Millisecond), ga.ErrCode, ga.DebugData(), ga.LastStreamID, resets)
	if ga.ErrCode != http2.ErrCodeEnhanceYourCalm || string(ga.DebugData()) != "too_many_early_resets" {
		t.Errorf("GOAWAY %v %q, want ENHANCE_YOUR_CALM too_many_early_resets", ga.ErrCode, ga.DebugData())
	}
	// Past its first 16 resets, each new stream is held until the guard
	// has read whether it is reset too: few streams reach grpc-go.
	if resets < 16 || resets >= b.ResetBurst {
		t.Errorf("GOAWAY after %d resets, want at least 16 and fewer than ResetBurst %d", resets, b.ResetBurst)
	}

	// Every stream the server took ended as canceled before its message:
	// counted, with no invocation and no call log record.
	waitFor(t, "every reset call to be counted", func() bool {
		return counterValue(t, reader, "sundial.grpc.calls.canceled", attribute.Bool("early", true)) == int64(resets)
	})
	if n := counterValue(t, reader, "sundial.grpc.connections.closed", attribute.String("reason", "too_many_early_resets")); n != 1 {
		t.Errorf("sundial.grpc.connections.closed{reason=too_many_early_resets} = %d, want 1", n)
	}
	if n := counterValue(t, reader, "sundial.invocations"); n > 1 {
		t.Logf("invocations counted: %d", n)
	}
	if _, st := h.call(t.Context(), t, "/test.v1.Work/Tiny", `{}`); st != nil {
		t.Fatalf("a call on another connection after the flood: %v", st)
	}
	records := h.logs.Records()[before:]
	closed := h.findLog("grpcadapter: connection closed with GOAWAY ENHANCE_YOUR_CALM", "reason=too_many_early_resets", "level=WARN")
	t.Logf("log records during the flood: %d", len(records))
	if len(closed) != 1 {
		t.Errorf("%d records of the closed connection, want 1", len(closed))
	}
	// The guard's record and the call after the flood.
	if len(records) > 2 {
		t.Errorf("%d log records for %d reset calls, want 2 (the closed connection, the call after):", len(records), resets)
		for _, r := range records[:min(len(records), 10)] {
			t.Logf("  %s %s %v", r.Level, r.Message, r.Attrs)
		}
	}
}

// TestGuardPassesTheGRPCClient: a grpc-go client through the guard:
// calls, their cancellations and a stalled call's answer work as without
// it.
func TestGuardClosesNothingForAWellBehavedClient(t *testing.T) {
	h, reader := guardedHarness(t, grpcadapter.DefaultBounds())
	for range 50 {
		if _, st := h.call(t.Context(), t, "/test.v1.Work/Tiny", `{"n":1}`); st != nil {
			t.Fatal(st)
		}
	}
	if n := counterValue(t, reader, "sundial.grpc.connections.closed"); n != 0 {
		t.Errorf("sundial.grpc.connections.closed = %d, want 0", n)
	}
}

// goAway is what a GOAWAY frame said (the frame is the framer's only until
// the next read).
type goAway struct {
	code  http2.ErrCode
	debug string
	last  uint32
}

// TestStallingConnectionGetsGoAway: a raw client opens 200 calls on one
// connection and never sends their messages. The first ones are answered
// DeadlineExceeded at WithRecvTimeout; once the connection has stalled
// more calls than the guard allows (16 at once), it is sent GOAWAY
// ENHANCE_YOUR_CALM and closed, and the calls it still held end without
// an answer, an invocation or a log record each. The streams the guard
// held back (past awaitFree) are past the GOAWAY's last stream: never
// started, and safe for the client to retry.
func TestStallingConnectionGetsGoAway(t *testing.T) {
	const (
		calls = 200
		bound = 100 * time.Millisecond
	)
	h, reader := guardedHarness(t, grpcadapter.DefaultBounds(), grpcadapter.WithRecvTimeout(bound))
	c := dialRaw(t, h.addr, "/test.v1.Work/Tiny")
	for i := range calls {
		if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: uint32(2*i + 1), BlockFragment: c.hdr, EndHeaders: true}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.bw.Flush(); err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	answered := 0
	var ga *goAway
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			break // the server closed the connection
		}
		switch f := f.(type) {
		case *http2.GoAwayFrame:
			ga = &goAway{f.ErrCode, string(f.DebugData()), f.LastStreamID}
		case *http2.HeadersFrame:
			if f.StreamEnded() {
				answered++
			}
		}
	}
	if ga == nil {
		t.Fatalf("%d stalled calls: the connection ended without GOAWAY after %d answers", calls, answered)
	}
	t.Logf("%d stalled calls: GOAWAY %v %q, %d answers on the wire", calls, ga.code, ga.debug, answered)
	if ga.code != http2.ErrCodeEnhanceYourCalm || ga.debug != "too_many_stalled_requests" {
		t.Errorf("GOAWAY %v %q, want ENHANCE_YOUR_CALM too_many_stalled_requests", ga.code, ga.debug)
	}
	// The guard counts a close before its GOAWAY goes out
	// (TestGuardCountsTheCloseBeforeTheClientSeesIt): the count is there
	// once the GOAWAY is read, whatever the schedule.
	if n := counterValue(t, reader, "sundial.grpc.connections.closed", attribute.String("reason", "too_many_stalled_requests")); n != 1 {
		t.Errorf("sundial.grpc.connections.closed{reason=too_many_stalled_requests} = %d, want 1", n)
	}
	// Every call up to the GOAWAY's last stream is accounted for:
	// answered at the bound (a "grpc call" record each; the 16 the guard
	// allows) or ended with its connection (counted, not logged).
	accepted := int(ga.last+1) / 2
	if accepted < 16 || accepted > calls {
		t.Fatalf("GOAWAY's last stream %d: %d calls accepted, want 16 to %d", ga.last, accepted, calls)
	}
	var timedOut int
	var early int64
	waitFor(t, "every stalled call to end", func() bool {
		timedOut = len(h.findLog("grpc call", "grpcCode=DeadlineExceeded"))
		early = counterValue(t, reader, "sundial.grpc.calls.canceled", attribute.Bool("early", true))
		return timedOut+int(early) == accepted
	})
	t.Logf("%d answered at the bound, %d ended with the connection, %d held back", timedOut, early, calls-accepted)
	// 16 at once, and one more for each second the stalls took to time
	// out: on a loaded machine they may spread past a second.
	if most := 16 + int(time.Since(sent)/time.Second); timedOut < 16 || timedOut > most {
		t.Errorf("%d calls answered at the bound, want the 16 the guard allows at once, at most %d in all", timedOut, most)
	}
	if _, st := h.call(t.Context(), t, "/test.v1.Work/Tiny", `{}`); st != nil {
		t.Fatalf("a call on another connection after the stall: %v", st)
	}
}

// TestMaxConnectionsRefusesTheNext: past MaxConnections a connection is
// closed as it is accepted, and counted; once one closes, the next is
// served.
func TestMaxConnectionsRefusesTheNext(t *testing.T) {
	b := grpcadapter.DefaultBounds()
	b.MaxConnections = 2
	h, reader := guardedHarness(t, b)
	if _, st := h.call(t.Context(), t, "/test.v1.Work/Tiny", `{}`); st != nil { // the harness's connection
		t.Fatal(st)
	}
	second := dialRaw(t, h.addr, "/test.v1.Work/Tiny")
	if err := second.bw.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := second.fr.ReadFrame(); err != nil { // the server's SETTINGS: accepted
		t.Fatalf("the second connection: %v, want the server's SETTINGS", err)
	}
	third := dialRaw(t, h.addr, "/test.v1.Work/Tiny")
	_ = third.bw.Flush()
	if f, err := third.fr.ReadFrame(); err == nil {
		t.Fatalf("the third connection got %v, want it closed", f)
	}
	if n := counterValue(t, reader, "sundial.grpc.connections.refused"); n != 1 {
		t.Errorf("sundial.grpc.connections.refused = %d, want 1", n)
	}
	second.conn.Close()
	waitFor(t, "a fourth connection to be served", func() bool {
		fourth := dialRaw(t, h.addr, "/test.v1.Work/Tiny")
		defer fourth.conn.Close()
		_ = fourth.bw.Flush()
		_, err := fourth.fr.ReadFrame()
		return err == nil
	})
}
