package grpcadapter

import (
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"

	"github.com/sundial-go/sundial/adapters/internal/rpccall"
	"github.com/sundial-go/sundial/kernel/logs"
)

// This file guards a gRPC listener's connections: it bounds how many are
// open, and closes one whose client misbehaves with GOAWAY
// ENHANCE_YOUR_CALM. grpc-go has no hook on its connections but the
// transport credentials, whose handshake returns the net.Conn its HTTP/2
// transport reads and writes; the guard wraps it and reads the frame
// headers that pass (after TLS, when the credentials it wraps do TLS).

// HTTP/2 frame types, flags and error codes the guard reads and writes
// (RFC 9113).
const (
	frameData         = 0x0
	frameHeaders      = 0x1
	frameRSTStream    = 0x3
	frameGoAway       = 0x7
	frameContinuation = 0x9
	flagEndStream     = 0x1
	flagEndHeaders    = 0x4
	flagPadded        = 0x8
	flagPriority      = 0x20

	errCodeEnhanceYourCalm = 0xb

	frameHeaderLen = 9
	clientPreface  = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
)

// Why the guard closed a connection: the GOAWAY's debug data, and the
// reason attribute of sundial.grpc.connections.closed.
const (
	reasonResets = "too_many_early_resets"
	reasonStalls = "too_many_stalled_requests"
)

// stallBurst and stallRate bound the calls of one connection whose
// request message does not arrive within WithRecvTimeout: stallBurst at
// once, stallRate a second on average. A client that sends its headers
// sends its message with them; one that does not, call after call, holds
// the server's streams for nothing.
const (
	stallBurst = 16
	stallRate  = 1.0
)

// A connection holds at most awaitFree streams whose request message is
// not complete (guardmsg.go). Past them, each new stream waits for the
// guard's pacer: pacedBurst at once, pacedRate a second after, shared by the
// listener's connections. A client's stub sends each call's message right
// after its headers, so its streams wait only while it stalls them. A
// flood of stalled calls is then admitted at a steady pace, not by the
// hundred at once, and the work of answering them is spread alike.
//
// Only a unary method or a server stream waits for a request message. A
// client or bidi stream may open and send nothing for a while; the
// kernel's idle clock bounds it instead. The guard reads each stream's
// method from its header block (the HPACK-coded :path) and stops counting
// a stream of such a method once its header block is complete.
const (
	awaitFree  = 16
	pacedBurst = 16
	pacedRate  = 256
)

// The listener bounds the streams of all its connections that await
// their request message. Each connection's first awaitOwn pass freely.
// A stream past them passes only while the listener has fewer than
// awaitShared in all; else it waits for room as well as for the pacer.
// With C connections, grpc-go then holds at most
// min(awaitFree·C, awaitShared + awaitOwn·C) such streams. Only streams
// past a connection's first awaitOwn take shared places: a connection
// with awaitOwn or fewer waiting is never held for room. To fill the
// places, a flood must stall more than awaitOwn streams on each of its
// connections, and each connection's stalls are charged (stallRate).
//
// While a stream waits for room, the guard reads ahead up to readAhead
// bytes of its connection. So it sees the client leave (end of input, a
// reset), and closes the connection, which frees its streams. A client
// that fills the read-ahead waits for room without being read.
const (
	awaitOwn    = 4
	awaitShared = 256
	readAhead   = 16 << 10
)

// holdPool keeps the buffers of held bytes (guardedConn.bufs) between
// the times a connection holds a stream.
var holdPool = sync.Pool{New: func() any { return new([]byte) }}

// holdPooled is the largest buffer holdPool keeps.
const holdPooled = 64 << 10

// resetsFree is how many early resets a connection may make at once
// before its new streams wait for the pacer too. Each stream grpc-go
// takes starts a goroutine, reset or not; a connection that resets
// streams as it opens them then starts at most resetsFree at once. One
// that resets a stream while the guard holds it back is closed.
const resetsFree = 16

// guardLinger is how long a connection the guard closes stays open for
// reading after its GOAWAY, which the client then reads before the close
// (golang.org/x/net/http2's server waits as long).
const guardLinger = time.Second

// errGuardClosed is the read error that ends a connection the guard
// closed: grpc-go's transport then closes it.
var errGuardClosed = errors.New("grpcadapter: connection closed by the listener's guard")

// errTooManyConnections refuses a connection past MaxConnections.
var errTooManyConnections = errors.New("grpcadapter: too many connections")

// msgGuardClosed is the message of the record of a connection the guard
// closes. Such records are sampled (logs.Sampler).
const msgGuardClosed = "grpcadapter: connection closed with GOAWAY ENHANCE_YOUR_CALM"

// guard is the transport credentials Bounds.ServerOptions installs.
type guard struct {
	inner      credentials.TransportCredentials
	resetBurst float64
	resetRate  float64
	maxConns   int64
	logger     *slog.Logger
	mp         metric.MeterProvider

	open     atomic.Int64 // connections handed to grpc-go and not closed
	paced    pacer        // the streams opened past awaitFree
	waiting  atomic.Int64 // streams passed to grpc-go that await their message
	roomMu   sync.Mutex
	waiters  map[*guardedConn]struct{} // the connections waiting for room
	initOnce sync.Once
	closed   metric.Int64Counter // sundial.grpc.connections.closed
	refused  metric.Int64Counter // sundial.grpc.connections.refused
}

// newGuard returns the guard of b around inner (nil: no security).
func newGuard(b Bounds, inner credentials.TransportCredentials) *guard {
	if inner == nil {
		inner = insecure.NewCredentials()
	}
	// A client can open connections only to have them closed.
	logger := logs.Sampled(b.Logger, slog.LevelWarn, msgGuardClosed)
	return &guard{
		inner:      inner,
		resetBurst: float64(b.ResetBurst),
		resetRate:  b.ResetRate,
		maxConns:   int64(b.MaxConnections),
		logger:     logger,
		mp:         b.MeterProvider,
		paced:      newPacer(pacedBurst, pacedRate),
	}
}

// instruments creates the guard's counters on first use.
func (g *guard) instruments() {
	g.initOnce.Do(func() {
		mp := g.mp
		if mp == nil {
			mp = otel.GetMeterProvider()
		}
		m := mp.Meter(meterName)
		g.closed, _ = m.Int64Counter("sundial.grpc.connections.closed",
			metric.WithDescription("gRPC connections closed with GOAWAY ENHANCE_YOUR_CALM, by reason."),
			metric.WithUnit("{connection}"))
		g.refused, _ = m.Int64Counter("sundial.grpc.connections.refused",
			metric.WithDescription("gRPC connections refused past Bounds.MaxConnections."),
			metric.WithUnit("{connection}"))
	})
}

func (g *guard) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	if n := g.open.Add(1); g.maxConns > 0 && n > g.maxConns {
		g.open.Add(-1)
		g.instruments()
		if g.refused != nil {
			g.refused.Add(context.Background(), 1)
		}
		return nil, nil, errTooManyConnections // grpc-go closes raw
	}
	conn, info, err := g.inner.ServerHandshake(raw)
	if err != nil {
		g.open.Add(-1)
		return nil, nil, err
	}
	c := &guardedConn{
		Conn:   conn,
		g:      g,
		in:     frameScanner{skip: len(clientPreface), body: true},
		open:   make(map[uint32]struct{}),
		await:  make(map[uint32]bool),
		msgs:   make(map[uint32]msgProgress),
		wake:   make(chan struct{}),
		poke:   make(chan struct{}, 1),
		resets: bucket{tokens: g.resetBurst, burst: g.resetBurst, rate: g.resetRate},
		stalls: bucket{tokens: stallBurst, burst: stallBurst, rate: stallRate},
	}
	c.hdec = hpack.NewDecoder(hpackTableSize, c.headerField)
	c.hdec.SetAllowedMaxDynamicTableSize(hpackMaxTableSize)
	c.hdec.SetMaxStringLength(hpackMaxString)
	if c.key = connKey(conn.LocalAddr(), conn.RemoteAddr()); c.key != "" {
		guarded.Store(c.key, c)
	}
	return c, info, nil
}

func (g *guard) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return g.inner.ClientHandshake(ctx, authority, raw)
}

func (g *guard) Info() credentials.ProtocolInfo { return g.inner.Info() }

func (g *guard) Clone() credentials.TransportCredentials {
	c := &guard{inner: g.inner.Clone(), resetBurst: g.resetBurst, resetRate: g.resetRate,
		maxConns: g.maxConns, logger: g.logger, mp: g.mp, paced: newPacer(pacedBurst, pacedRate)}
	return c
}

// OverrideServerName is the wrapped credentials' (deprecated in grpc-go).
func (g *guard) OverrideServerName(name string) error {
	return g.inner.OverrideServerName(name) //nolint:staticcheck // the interface's method
}

// guarded maps the addresses of every guarded TCP connection (connKey) to
// it, for the calls that charge their connection (chargeStall).
var guarded sync.Map

// connKey returns the key of a TCP connection in guarded: its two
// addresses, which no other connection of the process has at once. Other
// connections (a Unix socket's peers may have no address) have none ("").
func connKey(local, remote net.Addr) string {
	l, ok1 := local.(*net.TCPAddr)
	r, ok2 := remote.(*net.TCPAddr)
	if !ok1 || !ok2 {
		return ""
	}
	return l.String() + "|" + r.String()
}

// bucket is a token bucket: burst tokens, refilled at rate a second.
type bucket struct {
	tokens, burst, rate float64
	last                time.Time
}

// take spends one token at now and reports whether there was one. A
// bucket of burst 0 always has one (no bound).
func (b *bucket) take(now time.Time) bool {
	if b.burst <= 0 {
		return true
	}
	if !b.last.IsZero() {
		b.tokens = min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.rate)
	}
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// level returns the tokens the bucket has at now.
func (b *bucket) level(now time.Time) float64 {
	if b.last.IsZero() {
		return b.tokens
	}
	return min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.rate)
}

// frameScanner follows the frames of one direction of an HTTP/2
// connection, however its bytes are split between reads or writes.
type frameScanner struct {
	skip int // bytes of the client preface still to pass
	hdr  [frameHeaderLen]byte
	n    int    // header bytes gathered
	left uint32 // payload bytes of the current frame still to pass
	// body: the scan passes the payload of header block frames
	// (HEADERS, CONTINUATION) to its payload function. The frame
	// function may set block for the payload of another frame.
	body  bool
	block bool // the current frame's payload goes to the payload function
	typ   byte // the current frame's type
}

// atBoundary reports whether the bytes so far end a frame.
func (s *frameScanner) atBoundary() bool { return s.skip == 0 && s.n == 0 && s.left == 0 }

// scan passes p, calling f with each frame header completed in it. When
// f returns false, scan stops and returns false with the offsets in p
// where that frame's header starts (0 when it started in an earlier p)
// and ends; a later scan goes on from its end. With s.body set, payload
// gets the payload of each header block frame, piece by piece; end is
// set on its last piece.
func (s *frameScanner) scan(p []byte, f func(typ, flags byte, id uint32) bool, payload func(b []byte, end bool)) (start, end int, ok bool) {
	i := 0
	for i < len(p) {
		switch {
		case s.skip > 0:
			k := min(s.skip, len(p)-i)
			s.skip -= k
			i += k
		case s.left > 0:
			k := min(int(s.left), len(p)-i)
			s.left -= uint32(k)
			if s.block {
				s.block = s.left > 0
				payload(p[i:i+k], s.left == 0)
			}
			i += k
		default:
			start := i - s.n
			k := copy(s.hdr[s.n:], p[i:])
			s.n += k
			i += k
			if s.n < frameHeaderLen {
				continue
			}
			s.n = 0
			s.left = uint32(s.hdr[0])<<16 | uint32(s.hdr[1])<<8 | uint32(s.hdr[2])
			id := binary.BigEndian.Uint32(s.hdr[5:]) & (1<<31 - 1)
			typ := s.hdr[3]
			s.typ = typ
			s.block = s.body && (typ == frameHeaders || typ == frameContinuation)
			ok := f(typ, s.hdr[4], id)
			if s.block && s.left == 0 {
				s.block = false
				payload(nil, true)
			}
			if !ok {
				return max(start, 0), i, false
			}
		}
	}
	return len(p), len(p), true
}

// maxOpen bounds the streams a guarded connection tracks: grpc-go holds
// at most MaxConcurrentStreams open, and refuses the others.
const maxOpen = 1 << 12

// guardedConn is one guarded connection. grpc-go reads it on one
// goroutine and writes it on another.
type guardedConn struct {
	net.Conn
	g   *guard
	key string

	// The reader's: the client's frames.
	in       frameScanner
	resets   bucket
	paceOwed bool   // the next read waits for the pacer first
	heldID   uint32 // a stream held back for its early resets, until its read
	heldGone bool   // the client reset heldID before the guard passed it
	held     []byte // bytes read from the client and not yet returned
	heldErr  error  // the read error that came with held
	// The buffer of held, and a spare (holdPool's): held bytes are copied,
	// and the two serve in turn. Both go back once held is empty.
	bufs    [2]*[]byte
	ahead   int    // the bytes of held read ahead (readAhead)
	pacedID uint32 // the stream held back for the pacer
	hdec    *hpack.Decoder
	blk     headerBlock
	nheld   atomic.Int64 // the streams held back for the pacer

	mu   sync.Mutex // guards open, await, maxStream and stalls
	open map[uint32]struct{}
	// The open streams whose message is not complete; true for those
	// passed to grpc-go, which the listener counts (guard.waiting).
	await map[uint32]bool
	// The streams of await whose message has begun: how much of it came.
	msgs      map[uint32]msgProgress
	data      dataFrame // the DATA frame being read
	maxStream uint32
	passed    uint32 // the highest stream passed to grpc-go: not held back
	stalls    bucket
	done      bool          // Close has uncounted the streams (guard.waiting)
	wake      chan struct{} // closed when the connection closes or trips
	wakeOnce  sync.Once
	poke      chan struct{} // the listener may have room (guard.waiters)

	wmu  sync.Mutex // guards out and sent, and serialises writes
	out  frameScanner
	sent bool // the GOAWAY was written

	tripping  atomic.Bool // trip has begun
	reason    string      // why, set before tripped
	tripped   atomic.Bool
	closeOnce sync.Once
	dmu       sync.Mutex // orders the read deadlines of chargeStall, Close and pokes
	closing   bool       // Close has set the linger's read deadline
	reading   bool       // the reader reads ahead (readAheadOnce)
	poked     bool       // the listener may have room
}

// Read reads the client's bytes and follows its frames. Past the bound of
// early resets it returns the bytes before the frame that crossed it,
// sends GOAWAY, and fails the next read, which ends grpc-go's transport.
//
// A new stream past awaitFree is held back: the read returns the bytes up
// to its frame header, and the next read waits for the pacer (see pace)
// before it returns the rest. So is every new stream of a connection
// that has spent resetsFree of its early resets; if that read finds the
// stream reset, the guard closes the connection before grpc-go starts it.
func (c *guardedConn) Read(p []byte) (int, error) {
	if c.tripped.Load() {
		return 0, errGuardClosed
	}
	var before uint32 // the highest stream passed before a held one
	if c.paceOwed {
		c.paceOwed = false
		if err := c.pace(); err != nil {
			// The client left while its stream waited: no answer can
			// reach it. grpc-go ends the transport without the stream.
			c.held, c.heldErr = nil, nil
			c.release()
			return 0, err
		}
		if c.tripped.Load() {
			return 0, errGuardClosed
		}
		c.mu.Lock()
		before = c.passed
		c.passed = c.maxStream
		c.countLocked(c.pacedID)
		c.mu.Unlock()
	} else {
		c.heldID = 0
	}
	var (
		n   int
		err error
	)
	if len(c.held) > 0 {
		n = copy(p, c.held)
		if c.held = c.held[n:]; len(c.held) == 0 {
			err, c.heldErr = c.heldErr, nil
			c.release()
		}
	} else {
		n, err = c.Conn.Read(p)
	}
	cut, end, ok := c.in.scan(p[:n], c.clientFrame, c.payload)
	if c.heldGone {
		// grpc-go has the held stream's frame header only: it never
		// starts the stream, which the GOAWAY leaves out.
		c.mu.Lock()
		c.passed = before
		c.mu.Unlock()
		c.trip(reasonResets)
		return 0, errGuardClosed
	}
	switch {
	case ok:
		if c.tripped.Load() { // tripped by a call meanwhile (chargeStall)
			return 0, errGuardClosed
		}
		return n, err
	case c.paceOwed:
		// Hold back what follows the new stream's frame header. Its
		// payload, the header block, stays unread by grpc-go until then.
		if end < n {
			c.hold(p[end:n])
			if err != nil {
				c.heldErr, err = err, nil
			}
		}
		return end, err
	}
	c.trip(reasonResets)
	if cut == 0 {
		return 0, errGuardClosed
	}
	return cut, nil
}

// hold keeps b, bytes read from the client, for the next reads to return
// before the rest of held. It copies b, which is in the caller's buffer,
// into one of the connection's two buffers: a connection held stream
// after stream allocates nothing more once they are large enough.
func (c *guardedConn) hold(b []byte) { c.rehold(b, 0) }

// rehold makes b and then held the held bytes, in the spare buffer, with
// room for extra bytes after them.
func (c *guardedConn) rehold(b []byte, extra int) {
	need := len(b) + len(c.held) + extra
	if c.bufs[1] == nil {
		c.bufs[1] = holdPool.Get().(*[]byte)
	}
	spare := c.bufs[1]
	if cap(*spare) < need {
		*spare = make([]byte, 0, max(need, 4<<10))
	}
	*spare = append(append((*spare)[:0], b...), c.held...)
	c.held = *spare
	c.bufs[0], c.bufs[1] = spare, c.bufs[0]
}

// release gives the buffers of held bytes back to holdPool; held is empty.
func (c *guardedConn) release() {
	for i, b := range c.bufs {
		if b != nil && cap(*b) <= holdPooled {
			*b = (*b)[:0]
			holdPool.Put(b)
		}
		c.bufs[i] = nil
	}
	c.held, c.ahead = nil, 0
}

// clientFrame follows one frame from the client; it returns false when
// the frame is a reset past the bound, or opens a stream that must wait
// for the pacer (paceOwed is then set).
func (c *guardedConn) clientFrame(typ, flags byte, id uint32) bool {
	switch typ {
	case frameHeaders:
		c.blk.begin(id, flags, c.in.left)
		wary := c.resetting()
		c.mu.Lock()
		opened := id > c.maxStream
		c.blk.opened = opened
		if opened {
			c.maxStream = id
			if len(c.open) < maxOpen {
				c.open[id] = struct{}{}
			}
			if flags&flagEndStream == 0 && len(c.await) < maxOpen {
				c.await[id] = false
			}
		}
		held := opened && (len(c.await) > awaitFree || wary || !c.claimLocked(id))
		if opened && !held {
			c.passed = id
			c.countLocked(id)
		}
		c.mu.Unlock()
		if held && wary {
			c.heldID = id
		}
		if held {
			c.pacedID = id
			c.nheld.Add(1)
			c.paceOwed = true
			return false
		}
	case frameContinuation:
		c.blk.next(flags, c.in.left)
	case frameData:
		c.clientData(flags, id)
	case frameRSTStream:
		c.mu.Lock()
		_, early := c.open[id]
		delete(c.open, id)
		c.arrivedLocked(id)
		c.mu.Unlock()
		if id != 0 && id == c.heldID {
			c.heldGone = true
			return false
		}
		if early && !c.resets.take(time.Now()) {
			return false
		}
	}
	return true
}

// resetting reports whether the connection has spent resetsFree of its
// early resets, and not earned them back at ResetRate.
func (c *guardedConn) resetting() bool {
	b := &c.resets
	spent := b.burst - resetsFree + 1 // fewer tokens than this
	return b.burst > resetsFree && b.tokens < spent && b.level(time.Now()) < spent
}

// Write writes the server's bytes, following its frames: a stream it ends
// is no longer open. Once the guard has tripped, the GOAWAY goes out at
// the first frame boundary.
func (c *guardedConn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, _, _ = c.out.scan(p, c.serverFrame, nil)
	n, err := c.Conn.Write(p)
	if err == nil && c.tripped.Load() {
		c.goAwayLocked()
	}
	return n, err
}

// serverFrame follows one frame from the server.
func (c *guardedConn) serverFrame(typ, flags byte, id uint32) bool {
	if typ == frameRSTStream || (typ == frameHeaders || typ == frameData) && flags&flagEndStream != 0 {
		c.mu.Lock()
		delete(c.open, id)
		c.arrivedLocked(id)
		c.mu.Unlock()
	}
	return true
}

// pace waits for the guard's pacer, then for room among the listener's
// streams (awaitRoom), or until the connection closes or trips. grpc-go
// starts no goroutine for the held stream meanwhile. It returns the read
// error that tells the client left while its stream waited for room.
func (c *guardedConn) pace() error {
	if d := c.g.paced.reserve(time.Now()); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-c.wake:
			t.Stop()
			return nil
		}
	}
	return c.awaitRoom()
}

// awaitRoom waits until the held stream may pass (claimLocked), reading
// ahead meanwhile: a client that leaves is seen at once.
func (c *guardedConn) awaitRoom() error {
	if c.claim() {
		return nil
	}
	if c.heldErr != nil {
		return c.heldErr // the client has left
	}
	defer c.g.removeWaiter(c)
	for {
		// Listed before the claim: room made after it wakes this wait.
		c.g.addWaiter(c)
		if c.claim() {
			return nil
		}
		select {
		case <-c.wake:
			return nil
		default:
		}
		if err := c.readAheadOnce(); err != nil {
			return err
		}
	}
}

// claim claims room for the held stream (claimLocked).
func (c *guardedConn) claim() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.claimLocked(c.pacedID)
}

// claimLocked reports whether stream id may pass to grpc-go. One that
// awaits its message past the connection's first awaitOwn takes one of
// the listener's awaitShared places, if one is free, and is counted.
// c.mu is held.
func (c *guardedConn) claimLocked(id uint32) bool {
	counted, ok := c.await[id]
	if !ok || counted || len(c.await) <= awaitOwn || c.done {
		return true
	}
	for {
		n := c.g.waiting.Load()
		if n >= awaitShared {
			return false
		}
		if c.g.waiting.CompareAndSwap(n, n+1) {
			c.await[id] = true
			return true
		}
	}
}

// readAheadOnce reads the client's bytes after held, up to readAhead in
// all, until a poke. With the read-ahead full, it waits for a poke only.
// It returns the read error, if any, but a deadline's.
func (c *guardedConn) readAheadOnce() error {
	c.dmu.Lock()
	if c.poked || c.closing {
		c.poked = false
		c.dmu.Unlock()
		return nil
	}
	free := readAhead - c.ahead
	if free <= 0 {
		c.dmu.Unlock()
		select {
		case <-c.poke:
		case <-c.wake:
		}
		return nil
	}
	c.reading = true
	c.dmu.Unlock()
	if cap(c.held)-len(c.held) < free {
		c.rehold(nil, free)
	}
	tail := c.held[len(c.held) : len(c.held)+free]
	n, err := c.Conn.Read(tail)
	c.held = c.held[:len(c.held)+n]
	c.ahead += n
	c.dmu.Lock()
	c.reading = false
	if c.poked && !c.closing {
		_ = c.Conn.SetReadDeadline(time.Time{}) // the poke's
	}
	c.poked = false
	c.dmu.Unlock()
	select {
	case <-c.poke:
	default:
	}
	if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		return err
	}
	return nil
}

// wakeWaiter tells a connection waiting for room that there may be some.
// A read ahead under way ends at once.
func (c *guardedConn) wakeWaiter() {
	c.dmu.Lock()
	c.poked = true
	if c.reading && !c.closing {
		_ = c.Conn.SetReadDeadline(time.Now())
	}
	c.dmu.Unlock()
	select {
	case c.poke <- struct{}{}:
	default:
	}
}

// addWaiter adds c to the connections waiting for room.
func (g *guard) addWaiter(c *guardedConn) {
	g.roomMu.Lock()
	if g.waiters == nil {
		g.waiters = make(map[*guardedConn]struct{})
	}
	g.waiters[c] = struct{}{}
	g.roomMu.Unlock()
}

// removeWaiter removes c from the connections waiting for room.
func (g *guard) removeWaiter(c *guardedConn) {
	g.roomMu.Lock()
	delete(g.waiters, c)
	g.roomMu.Unlock()
}

// countLocked counts stream id, passed to grpc-go, among the listener's
// waiting streams if it awaits its message past the connection's first
// awaitOwn: those take no shared place. c.mu is held.
func (c *guardedConn) countLocked(id uint32) {
	if counted, ok := c.await[id]; ok && !counted && !c.done && len(c.await) > awaitOwn {
		c.await[id] = true
		c.g.waiting.Add(1)
	}
}

// arrivedLocked ends the wait of stream id for its message: it arrived,
// or the stream ended. c.mu is held.
func (c *guardedConn) arrivedLocked(id uint32) {
	counted, ok := c.await[id]
	if !ok {
		return
	}
	delete(c.await, id)
	if len(c.msgs) > 0 {
		delete(c.msgs, id)
	}
	if counted {
		c.g.uncount(1)
	}
	if len(c.await) == awaitOwn {
		// A stream of c that waits for room may pass now without one.
		c.g.wakeWaiting(c)
	}
}

// wakeWaiting wakes c if it waits for room.
func (g *guard) wakeWaiting(c *guardedConn) {
	g.roomMu.Lock()
	defer g.roomMu.Unlock()
	if _, ok := g.waiters[c]; ok {
		delete(g.waiters, c)
		c.wakeWaiter()
	}
}

// uncount takes n streams off the listener's waiting streams. It wakes
// as many connections waiting for room as there are places free; each
// lists itself again if it finds none.
func (g *guard) uncount(n int64) {
	free := awaitShared - g.waiting.Add(-n)
	if free <= 0 {
		return
	}
	g.roomMu.Lock()
	for c := range g.waiters {
		if free--; free < 0 {
			break
		}
		delete(g.waiters, c)
		c.wakeWaiter()
	}
	g.roomMu.Unlock()
}

// wakeReader ends a wait in pace.
func (c *guardedConn) wakeReader() {
	c.wakeOnce.Do(func() { close(c.wake) })
	c.wakeWaiter()
}

// pacer spaces events every interval on average, burst at once at most:
// a token bucket whose events reserve the time they may happen.
type pacer struct {
	mu    sync.Mutex
	next  time.Time // when the next event may happen, with no burst left
	every time.Duration
	burst int
}

func newPacer(burst int, rate float64) pacer {
	return pacer{every: time.Duration(float64(time.Second) / rate), burst: burst}
}

// reserve reserves the next event's time and returns how long after now
// it is (0 or less: now).
func (p *pacer) reserve(now time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if floor := now.Add(-time.Duration(p.burst-1) * p.every); p.next.Before(floor) {
		p.next = floor
	}
	at := p.next
	p.next = at.Add(p.every)
	return at.Sub(now)
}

// chargeStall charges the connection of a call whose request message did
// not arrive in time; past stallBurst the guard closes it. It reports
// whether the connection is closing, by this call or an earlier one: the
// call's answer would then reach no one.
func chargeStall(ctx context.Context) (closing bool) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return false
	}
	key := connKey(p.LocalAddr, p.Addr)
	if key == "" {
		return false
	}
	v, ok := guarded.Load(key)
	if !ok {
		return false
	}
	c := v.(*guardedConn)
	if c.tripped.Load() {
		return true
	}
	c.mu.Lock()
	ok = c.stalls.take(time.Now())
	c.mu.Unlock()
	if !ok {
		c.trip(reasonStalls)
		// The reader may wait for bytes that never come: wake it; its
		// read then fails and grpc-go ends the transport.
		c.dmu.Lock()
		if !c.closing {
			_ = c.Conn.SetReadDeadline(time.Now())
		}
		c.dmu.Unlock()
	}
	return !ok
}

// trip closes the connection for reason: GOAWAY ENHANCE_YOUR_CALM, now if
// the writer is idle between frames, else at its next frame boundary.
//
// The close is counted and logged before tripped is set. A client can
// see the close only after tripped is set: by the GOAWAY, which the
// writer, Close and trip itself send, or by the end of the connection.
func (c *guardedConn) trip(reason string) {
	if !c.tripping.CompareAndSwap(false, true) {
		return
	}
	c.reason = reason
	c.g.instruments()
	if c.g.closed != nil {
		c.g.closed.Add(context.Background(), 1, metric.WithAttributes(attribute.String("reason", reason)))
	}
	if l := c.g.logger; l != nil {
		l.LogAttrs(context.Background(), slog.LevelWarn, msgGuardClosed,
			slog.String("reason", reason), slog.String("remote", c.Conn.RemoteAddr().String()))
	}
	c.tripped.Store(true)
	c.wakeReader()
	if c.wmu.TryLock() {
		c.goAwayLocked()
		c.wmu.Unlock()
		return
	}
	// A write is under way, and may have looked at tripped before it was
	// set: write the GOAWAY once it is done. A write that never ends
	// (a client that does not read) ends with the connection.
	go func() {
		c.wmu.Lock()
		c.goAwayLocked()
		c.wmu.Unlock()
	}()
}

// goAwayLocked writes the GOAWAY once, at a frame boundary of the
// server's bytes; c.wmu is held. Its last stream is the highest the guard
// passed to grpc-go: a stream it held back was not processed, and the
// client may retry it.
func (c *guardedConn) goAwayLocked() {
	if c.sent || !c.out.atBoundary() {
		return
	}
	c.sent = true
	c.mu.Lock()
	last := c.passed
	c.mu.Unlock()
	f := make([]byte, frameHeaderLen+8, frameHeaderLen+8+len(c.reason))
	f = append(f, c.reason...)
	n := len(f) - frameHeaderLen
	f[0], f[1], f[2] = byte(n>>16), byte(n>>8), byte(n)
	f[3] = frameGoAway
	binary.BigEndian.PutUint32(f[9:], last)
	binary.BigEndian.PutUint32(f[13:], errCodeEnhanceYourCalm)
	_ = c.Conn.SetWriteDeadline(time.Now().Add(guardLinger))
	_, _ = c.Conn.Write(f)
}

// Close closes the connection. One the guard tripped stays open for
// guardLinger, its input discarded, so that the client reads the GOAWAY
// before the close (a close with unread input resets the connection).
func (c *guardedConn) Close() error {
	var err error
	c.closeOnce.Do(func() {
		c.g.open.Add(-1)
		c.mu.Lock()
		c.done = true
		for id := range c.await {
			c.arrivedLocked(id)
		}
		c.mu.Unlock()
		c.wakeReader()
		if !c.tripped.Load() {
			guarded.Delete(c.key)
			err = c.Conn.Close()
			return
		}
		// The GOAWAY goes out before the write side closes: trip may have
		// left it to a write still under way, or to the next frame
		// boundary. The deadline bounds a write the client never reads.
		_ = c.Conn.SetWriteDeadline(time.Now().Add(guardLinger))
		c.wmu.Lock()
		c.goAwayLocked()
		c.wmu.Unlock()
		if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
		c.dmu.Lock()
		c.closing = true
		_ = c.Conn.SetReadDeadline(time.Now().Add(guardLinger))
		c.dmu.Unlock()
		go c.linger()
	})
	return err
}

// linger discards the client's input until it closes or guardLinger
// passes, then closes the connection. The calls that end meanwhile still
// find it closing (chargeStall).
func (c *guardedConn) linger() {
	buf := make([]byte, 4<<10)
	for {
		if _, err := c.Conn.Read(buf); err != nil {
			break
		}
	}
	guarded.Delete(c.key)
	c.Conn.Close()
}

// meterName is the instrumentation scope of the adapter's instruments.
const meterName = rpccall.MeterName
