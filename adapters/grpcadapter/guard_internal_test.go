package grpcadapter

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/sundial-go/sundial/adapters/internal/rpccall"
	"github.com/sundial-go/sundial/kernel/logs/logstest"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
)

// pipeConn is a net.Conn whose input the test queues and whose output it
// reads back.
type pipeConn struct {
	mu     sync.Mutex
	in     [][]byte // reads, one chunk each
	out    bytes.Buffer
	closed bool
}

func (p *pipeConn) Read(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.in) == 0 {
		return 0, io.EOF
	}
	n := copy(b, p.in[0])
	if p.in[0] = p.in[0][n:]; len(p.in[0]) == 0 {
		p.in = p.in[1:]
	}
	return n, nil
}

func (p *pipeConn) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.Write(b)
}

func (p *pipeConn) Close() error                     { p.closed = true; return nil }
func (p *pipeConn) LocalAddr() net.Addr              { return &net.TCPAddr{Port: 1} }
func (p *pipeConn) RemoteAddr() net.Addr             { return &net.TCPAddr{Port: 2} }
func (p *pipeConn) SetDeadline(time.Time) error      { return nil }
func (p *pipeConn) SetReadDeadline(time.Time) error  { return nil }
func (p *pipeConn) SetWriteDeadline(time.Time) error { return nil }

// frame returns one HTTP/2 frame with a payload of n zero bytes.
func frame(typ, flags byte, id uint32, n int) []byte {
	f := make([]byte, frameHeaderLen+n)
	f[0], f[1], f[2] = byte(n>>16), byte(n>>8), byte(n)
	f[3], f[4] = typ, flags
	binary.BigEndian.PutUint32(f[5:], id)
	return f
}

func newTestConn(t *testing.T, burst int, rate float64) (*guardedConn, *pipeConn) {
	t.Helper()
	p := &pipeConn{}
	g := newGuard(Bounds{ResetBurst: burst, ResetRate: rate}, nil)
	c, _, err := g.ServerHandshake(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { guarded.Delete(c.(*guardedConn).key) })
	return c.(*guardedConn), p
}

// feed queues b as one read and reads it through c; it returns what the
// read returned.
func feed(c *guardedConn, p *pipeConn, b []byte) (int, error) {
	p.mu.Lock()
	p.in = append(p.in, b)
	p.mu.Unlock()
	return c.Read(make([]byte, len(b)+1))
}

// goAwayIn returns the last stream, error code and debug data of the
// first GOAWAY frame in out.
func goAwayIn(t *testing.T, out []byte) (last, code uint32, debug string, ok bool) {
	t.Helper()
	for len(out) >= frameHeaderLen {
		n := int(out[0])<<16 | int(out[1])<<8 | int(out[2])
		if len(out) < frameHeaderLen+n {
			break
		}
		if out[3] == frameGoAway {
			p := out[frameHeaderLen : frameHeaderLen+n]
			return binary.BigEndian.Uint32(p), binary.BigEndian.Uint32(p[4:]), string(p[8:]), true
		}
		out = out[frameHeaderLen+n:]
	}
	return 0, 0, "", false
}

// TestGuardBoundsEarlyResets: the guard lets a connection reset burst
// streams at once and rate a second after; the reset past them gets
// GOAWAY ENHANCE_YOUR_CALM naming the last stream, the read stops before
// it, and the next read fails. A client that resets at the rate, or resets
// streams the server has ended, is never closed.
func TestGuardBoundsEarlyResets(t *testing.T) {
	const burst, rate = 4, 2.0
	synctest.Test(t, func(t *testing.T) {
		c, p := newTestConn(t, burst, rate)
		if _, err := feed(c, p, []byte(clientPreface)); err != nil {
			t.Fatal(err)
		}
		id := uint32(1)
		open := func() []byte { return frame(frameHeaders, 0x4, id, 3) }
		reset := func() []byte { return frame(frameRSTStream, 0, id, 4) }
		// A burst, then one a second (half the rate) for a minute.
		for i := range burst + 60 {
			if i >= burst {
				time.Sleep(time.Second)
			}
			in := append(open(), reset()...)
			if n, err := feed(c, p, in); n != len(in) || err != nil {
				t.Fatalf("reset %d (stream %d): read %d of %d bytes, %v", i+1, id, n, len(in), err)
			}
			id += 2
		}
		// Streams the server ended first: their resets are not early.
		for range 3 * burst {
			if _, err := feed(c, p, open()); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Write(frame(frameHeaders, flagEndStream|0x4, id, 2)); err != nil {
				t.Fatal(err)
			}
			if n, err := feed(c, p, reset()); n != len(reset()) || err != nil {
				t.Fatalf("a reset after the server's answer: read %d, %v", n, err)
			}
			id += 2
		}
		if _, _, _, ok := goAwayIn(t, p.out.Bytes()); ok || c.tripped.Load() {
			t.Fatal("GOAWAY sent to a client under the bound")
		}
		// A burst at once, in one read, once the bucket is full again: the
		// first burst pass, the next one trips.
		time.Sleep(time.Second)
		var in []byte
		for range burst + 1 {
			in = append(in, open()...)
			in = append(in, reset()...)
			id += 2
		}
		lastID := id - 2
		n, err := feed(c, p, in)
		want := len(in) - len(reset())
		if n != want || err != nil {
			t.Fatalf("read %d bytes, %v; want the %d before the reset past the bound", n, err, want)
		}
		if _, err := c.Read(make([]byte, 64)); !errors.Is(err, errGuardClosed) {
			t.Fatalf("the read after the trip: %v, want errGuardClosed", err)
		}
		last, code, debug, ok := goAwayIn(t, p.out.Bytes())
		if !ok || last != lastID || code != errCodeEnhanceYourCalm || debug != reasonResets {
			t.Fatalf("GOAWAY %v: last stream %d, code %#x, %q; want %d, ENHANCE_YOUR_CALM, %q",
				ok, last, code, debug, lastID, reasonResets)
		}
		c.Close()
		time.Sleep(guardLinger) // the linger reads EOF at once
		synctest.Wait()
		if !p.closed {
			t.Error("the connection was not closed after the GOAWAY")
		}
	})
}

// TestGuardScansSplitFrames: frame headers split across reads at every
// byte are followed as whole ones. The reset past the bound never reaches
// grpc-go whole: the read that completes its header returns nothing.
func TestGuardScansSplitFrames(t *testing.T) {
	c, p := newTestConn(t, 1, 0)
	var in []byte
	in = append(in, clientPreface...)
	for id := uint32(1); id <= 5; id += 2 {
		in = append(in, frame(frameHeaders, 0x4, id, 5)...)
		in = append(in, frame(frameData, 0, id, 7)...)
		in = append(in, frame(frameRSTStream, 0, id, 4)...)
	}
	total := 0
	for i := range in {
		n, err := feed(c, p, in[i:i+1])
		total += n
		if err != nil || c.tripped.Load() {
			break
		}
	}
	// The first reset passes (burst 1, no refill), the second trips: the
	// read of its header's last byte returns nothing.
	stream := 3*frameHeaderLen + 5 + 7 + 4
	second := len(clientPreface) + stream + (stream - frameHeaderLen - 4)
	if want := second + frameHeaderLen - 1; !c.tripped.Load() || total != want {
		t.Fatalf("tripped %v after %d bytes, want true after %d", c.tripped.Load(), total, want)
	}
}

// TestGuardWritesGoAwayAtAFrameBoundary: a trip while the server is in
// the middle of a frame sends the GOAWAY once the frame is written.
func TestGuardWritesGoAwayAtAFrameBoundary(t *testing.T) {
	c, p := newTestConn(t, 1, 0)
	data := frame(frameData, 0, 1, 100)
	if _, err := c.Write(data[:50]); err != nil {
		t.Fatal(err)
	}
	c.trip(reasonStalls)
	if _, _, _, ok := goAwayIn(t, p.out.Bytes()); ok {
		t.Fatal("GOAWAY written in the middle of a frame")
	}
	if _, err := c.Write(data[50:]); err != nil {
		t.Fatal(err)
	}
	out := p.out.Bytes()
	if !bytes.Equal(out[:len(data)], data) {
		t.Fatal("the server's frame was not written whole first")
	}
	if _, code, debug, ok := goAwayIn(t, out); !ok || code != errCodeEnhanceYourCalm || debug != reasonStalls {
		t.Fatalf("GOAWAY %v %#x %q after the frame, want ENHANCE_YOUR_CALM %q", ok, code, debug, reasonStalls)
	}
}

// TestCanceledCallsAreSampled: of 100 calls canceled by their clients at
// once, 10 get a record each; 10 s after the first of the others one
// record sums them up, early ones included; a second later one more gets
// its own.
func TestCanceledCallsAreSampled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		logs := new(pipelinetest.LogSink)
		c := rpccall.NewCanceled(logs.Logger(), noop.NewMeterProvider())
		own := 0
		for i := range 100 {
			if c.Add(t.Context(), i%10 == 9) {
				own++
			}
		}
		if own != logstest.SampleBurst {
			t.Fatalf("%d of 100 canceled calls got a record each, want %d", own, logstest.SampleBurst)
		}
		time.Sleep(logstest.SampleSummaryAfter - time.Nanosecond)
		synctest.Wait()
		if n := len(logs.Records()); n != 0 {
			t.Fatalf("%d records before the summary is due, want 0", n)
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		recs := logs.Records()
		if len(recs) != 1 || recs[0].Message != "grpc calls canceled by their clients" || recs[0].Attrs["calls"] != int64(100-own) {
			t.Fatalf("records %+v, want one summing up %d calls", recs, 100-own)
		}
		if !c.Add(t.Context(), false) {
			t.Error("a canceled call 10 s later got no record of its own")
		}
	})
}

// TestGuardPacesStreamsAwaitingTheirMessage: a connection opens awaitFree
// streams whose message has not come at once; the read of the next new
// stream returns the bytes up to its frame header, and the read after it
// waits for the pacer: pacedBurst of them at once, then one every
// 1/pacedRate. A client whose streams carry their message is never held.
func TestGuardPacesStreamsAwaitingTheirMessage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, p := newTestConn(t, 0, 0)
		if _, err := feed(c, p, []byte(clientPreface)); err != nil {
			t.Fatal(err)
		}
		id := uint32(1)
		// A well-behaved client: 10 times awaitFree calls at once, each
		// with its message, in one read.
		var in []byte
		for range 10 * awaitFree {
			in = append(in, frame(frameHeaders, 0x4, id, 3)...)
			in = append(in, frame(frameData, flagEndStream, id, 5)...)
			id += 2
		}
		start := time.Now()
		if n, err := feed(c, p, in); n != len(in) || err != nil {
			t.Fatalf("calls with their message: read %d of %d bytes, %v", n, len(in), err)
		}
		// A stalling client: streams without their message, in one read.
		const stalled = awaitFree + pacedBurst + 4
		in = in[:0]
		for range stalled {
			in = append(in, frame(frameHeaders, 0x4, id, 3)...)
			id += 2
		}
		p.mu.Lock()
		p.in = append(p.in, in)
		p.mu.Unlock()
		got := 0
		var at []time.Duration // when each held stream's header block was read
		buf := make([]byte, len(in)+1)
		for got < len(in) {
			n, err := c.Read(buf)
			if err != nil {
				t.Fatal(err)
			}
			if got > 0 && got%len(frame(frameHeaders, 0, 0, 3)) == frameHeaderLen {
				at = append(at, time.Since(start))
			}
			got += n
		}
		free := awaitFree * len(frame(frameHeaders, 0, 0, 3))
		if want := stalled - awaitFree; len(at) != want {
			t.Fatalf("%d streams held back, want %d (the first %d bytes free)", len(at), want, free)
		}
		every := time.Second / pacedRate
		for i, d := range at {
			want := time.Duration(0)
			if i >= pacedBurst {
				want = time.Duration(i-pacedBurst+1) * every
			}
			if d != want {
				t.Errorf("held stream %d read after %v, want %v", i+1, d, want)
			}
		}
		// Once the server has answered the stalled streams, a new one is
		// free again.
		for sid := id - 2*stalled; sid < id; sid += 2 {
			if _, err := c.Write(frame(frameHeaders, flagEndStream|0x4, sid, 2)); err != nil {
				t.Fatal(err)
			}
		}
		if n, err := feed(c, p, frame(frameHeaders, 0x4, id, 3)); n != frameHeaderLen+3 || err != nil {
			t.Fatalf("a stream after the answers: read %d bytes, %v", n, err)
		}
		if c.tripped.Load() {
			t.Fatal("the guard tripped on paced streams")
		}
	})
}

// hookedProvider is a MeterProvider whose connections.closed counter
// calls add as it records.
type hookedProvider struct {
	noop.MeterProvider
	add func()
}

func (p hookedProvider) Meter(string, ...metric.MeterOption) metric.Meter {
	return hookedMeter{add: p.add}
}

type hookedMeter struct {
	noop.Meter
	add func()
}

func (m hookedMeter) Int64Counter(name string, _ ...metric.Int64CounterOption) (metric.Int64Counter, error) {
	if name != "sundial.grpc.connections.closed" {
		return noop.Int64Counter{}, nil
	}
	return hookedCounter{add: m.add}, nil
}

type hookedCounter struct {
	noop.Int64Counter
	add func()
}

func (c hookedCounter) Add(context.Context, int64, ...metric.AddOption) { c.add() }

// TestGuardCountsTheCloseBeforeTheClientSeesIt: the close is counted
// before a client can see it. While the counter records, the server's
// writer writes a frame, as it may on another goroutine: the GOAWAY does
// not go out with it. The reader is woken only once the close is counted.
func TestGuardCountsTheCloseBeforeTheClientSeesIt(t *testing.T) {
	p := &pipeConn{}
	var c *guardedConn
	counted := 0
	g := newGuard(Bounds{MeterProvider: hookedProvider{add: func() {
		counted++
		if _, err := c.Write(frame(frameHeaders, flagEndStream|0x4, 1, 2)); err != nil {
			t.Fatal(err)
		}
		if _, _, _, ok := goAwayIn(t, p.out.Bytes()); ok {
			t.Error("a write sent the GOAWAY before the close was counted")
		}
		select {
		case <-c.wake:
			t.Error("the reader was woken before the close was counted")
		default:
		}
	}}}, nil)
	nc, _, err := g.ServerHandshake(p)
	if err != nil {
		t.Fatal(err)
	}
	c = nc.(*guardedConn)
	t.Cleanup(func() { guarded.Delete(c.key) })
	c.trip(reasonStalls)
	if counted != 1 {
		t.Fatalf("the close was counted %d times, want 1", counted)
	}
	if _, code, debug, ok := goAwayIn(t, p.out.Bytes()); !ok || code != errCodeEnhanceYourCalm || debug != reasonStalls {
		t.Fatalf("GOAWAY %v %#x %q after the count, want ENHANCE_YOUR_CALM %q", ok, code, debug, reasonStalls)
	}
}

// TestGuardHoldsTheStreamsOfAResettingConnection: a connection opens and
// resets streams, each reset in the same write as its stream. After
// resetsFree of them, its next stream is held back: the read stops at
// its frame header. The read after finds that stream reset: it returns
// nothing and fails, and the GOAWAY leaves the stream out. grpc-go got
// resetsFree streams to start, not ResetBurst.
func TestGuardHoldsTheStreamsOfAResettingConnection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, p := newTestConn(t, 256, 256)
		if _, err := feed(c, p, []byte(clientPreface)); err != nil {
			t.Fatal(err)
		}
		pair := func(id uint32) []byte {
			return append(frame(frameHeaders, 0x4, id, 3), frame(frameRSTStream, 0, id, 4)...)
		}
		var in []byte
		for i := range resetsFree + 4 {
			in = append(in, pair(uint32(2*i+1))...)
		}
		lastFree := uint32(2*resetsFree - 1)
		n, err := feed(c, p, in)
		if want := resetsFree*len(pair(1)) + frameHeaderLen; n != want || err != nil {
			t.Fatalf("read %d bytes, %v; want the %d up to the held stream's frame header", n, err, want)
		}
		if c.tripped.Load() {
			t.Fatal("the guard tripped within resetsFree resets")
		}
		if n, err := c.Read(make([]byte, len(in))); n != 0 || !errors.Is(err, errGuardClosed) {
			t.Fatalf("the read after the hold: %d bytes, %v; want 0, errGuardClosed", n, err)
		}
		last, code, debug, ok := goAwayIn(t, p.out.Bytes())
		if !ok || last != lastFree || code != errCodeEnhanceYourCalm || debug != reasonResets {
			t.Fatalf("GOAWAY %v: last stream %d, code %#x, %q; want %d, ENHANCE_YOUR_CALM, %q",
				ok, last, code, debug, lastFree, reasonResets)
		}
	})
}

// TestGuardPassesTheHeldStreamsOfACancellingClient: a client cancels
// ResetBurst-1 calls it holds at once. Its next new stream, with its
// message, waits for the pacer, then passes whole; the connection stays
// open. Once its resets are earned back, its new streams are not held.
func TestGuardPassesTheHeldStreamsOfACancellingClient(t *testing.T) {
	const burst, rate = 64, 64.0
	synctest.Test(t, func(t *testing.T) {
		c, p := newTestConn(t, burst, rate)
		if _, err := feed(c, p, []byte(clientPreface)); err != nil {
			t.Fatal(err)
		}
		call := func(id uint32) []byte {
			return append(frame(frameHeaders, 0x4, id, 3), frame(frameData, flagEndStream, id, 5)...)
		}
		id := uint32(1)
		var in, resets []byte
		for range burst - 1 {
			in = append(in, call(id)...)
			resets = append(resets, frame(frameRSTStream, 0, id, 4)...)
			id += 2
		}
		if n, err := feed(c, p, in); n != len(in) || err != nil {
			t.Fatalf("calls: read %d of %d bytes, %v", n, len(in), err)
		}
		if n, err := feed(c, p, resets); n != len(resets) || err != nil {
			t.Fatalf("their resets: read %d of %d bytes, %v", n, len(resets), err)
		}
		next := call(id)
		if n, err := feed(c, p, next); n != frameHeaderLen || err != nil {
			t.Fatalf("a call after the resets: read %d bytes, %v; want its frame header only", n, err)
		}
		if n, err := c.Read(make([]byte, len(next))); n != len(next)-frameHeaderLen || err != nil {
			t.Fatalf("the read after the hold: %d bytes, %v; want the rest, %d", n, err, len(next)-frameHeaderLen)
		}
		id += 2
		time.Sleep(time.Second) // rate a second: every reset earned back
		next = call(id)
		if n, err := feed(c, p, next); n != len(next) || err != nil {
			t.Fatalf("a call a second later: read %d of %d bytes, %v", n, len(next), err)
		}
		if c.tripped.Load() {
			t.Fatal("the guard tripped on a client that cancelled its calls")
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.passed != id {
			t.Fatalf("passed stream %d, want %d", c.passed, id)
		}
	})
}

// TestGuardHoldKeepsBytesInOrderWithoutAllocating: held bytes come back
// in order, the newest read first, and a connection held stream after
// stream allocates nothing once its two buffers are large enough.
func TestGuardHoldKeepsBytesInOrderWithoutAllocating(t *testing.T) {
	c := &guardedConn{}
	c.hold([]byte("cd"))
	c.held = c.held[1:] // "d" left
	c.hold([]byte("ab"))
	if got := string(c.held); got != "abd" {
		t.Fatalf("held %q, want %q", got, "abd")
	}
	p := bytes.Repeat([]byte{'x'}, 1000)
	c.held = nil
	c.hold(p) // both buffers grow once
	c.hold(p[:10])
	allocs := testing.AllocsPerRun(100, func() {
		c.held = c.held[:0]
		c.hold(p)
		c.held = c.held[len(p)/2:]
	})
	if allocs != 0 {
		t.Errorf("hold allocated %v times a call, want 0", allocs)
	}
}
