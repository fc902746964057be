package grpcadapter

import (
	"encoding/binary"
	"io"
	"net"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// pipeClient is a client on one end of net.Pipe whose other end a guard
// took. A goroutine reads the guarded end as grpc-go does, and closes it
// once a read fails.
type pipeClient struct {
	c      *guardedConn
	client net.Conn
	out    chan []byte // what the client writes, in order
	done   chan struct{}
	gone   sync.Once

	mu  sync.Mutex
	got []byte // what the guarded end's reads returned
	err error  // the read error that ended them
}

// dialGuard connects a pipeClient to g and sends the client preface.
func dialGuard(t *testing.T, g *guard) *pipeClient {
	t.Helper()
	srv, cli := net.Pipe()
	nc, _, err := g.ServerHandshake(srv)
	if err != nil {
		t.Fatal(err)
	}
	pc := &pipeClient{c: nc.(*guardedConn), client: cli, out: make(chan []byte, 64), done: make(chan struct{})}
	go func() { _, _ = io.Copy(io.Discard, cli) }() // the server's frames
	go func() {
		for b := range pc.out {
			if _, err := cli.Write(b); err != nil {
				return
			}
		}
	}()
	go func() {
		defer close(pc.done)
		buf := make([]byte, 32<<10)
		for {
			n, err := pc.c.Read(buf)
			pc.mu.Lock()
			pc.got = append(pc.got, buf[:n]...)
			pc.err = err
			pc.mu.Unlock()
			if err != nil {
				pc.c.Close()
				return
			}
		}
	}()
	t.Cleanup(func() {
		pc.leave()
		<-pc.done
	})
	pc.send([]byte(clientPreface))
	return pc
}

// send queues b for the client to write.
func (pc *pipeClient) send(b []byte) { pc.out <- b }

// leave closes the client's end, as a client that goes away.
func (pc *pipeClient) leave() {
	pc.gone.Do(func() {
		close(pc.out)
		pc.client.Close()
	})
}

// stalled returns n streams' HEADERS frames without their message, the
// first with id first.
func stalled(first uint32, n int) []byte {
	var b []byte
	for i := range n {
		b = append(b, frame(frameHeaders, flagEndHeaders, first+2*uint32(i), 3)...)
	}
	return b
}

// passed returns the streams whose whole HEADERS frame the guarded end's
// reads returned: those grpc-go would start.
func (pc *pipeClient) passed() []uint32 {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	b := pc.got[min(len(pc.got), len(clientPreface)):]
	var ids []uint32
	for len(b) >= frameHeaderLen {
		n := int(b[0])<<16 | int(b[1])<<8 | int(b[2])
		if len(b) < frameHeaderLen+n {
			break
		}
		if b[3] == frameHeaders {
			ids = append(ids, binary.BigEndian.Uint32(b[5:])&(1<<31-1))
		}
		b = b[frameHeaderLen+n:]
	}
	return ids
}

// floodGuard connects conns clients to g, each with awaitFree streams
// that never send their message, and lets the pacer pass what it will.
func floodGuard(t *testing.T, g *guard, conns int) []*pipeClient {
	t.Helper()
	var flood []*pipeClient
	for range conns {
		pc := dialGuard(t, g)
		pc.send(stalled(1, awaitFree))
		flood = append(flood, pc)
	}
	time.Sleep(time.Second) // the pacer
	synctest.Wait()
	return flood
}

// waitingClient returns a client of flood with a stream that waits for
// room.
func waitingClient(t *testing.T, flood []*pipeClient) *pipeClient {
	t.Helper()
	for _, pc := range flood {
		if len(pc.passed()) < awaitFree {
			return pc
		}
	}
	t.Fatal("no connection waits for room: the flood never filled the listener")
	return nil
}

// counted returns the streams of pc's connection counted among the
// listener's waiting streams.
func counted(pc *pipeClient) int64 {
	pc.c.mu.Lock()
	defer pc.c.mu.Unlock()
	n := int64(0)
	for _, ok := range pc.c.await {
		if ok {
			n++
		}
	}
	return n
}

// sumPassed returns the streams passed on all of pcs.
func sumPassed(pcs []*pipeClient) int {
	n := 0
	for _, pc := range pcs {
		n += len(pc.passed())
	}
	return n
}

// TestGuardBoundsWaitingStreamsAcrossConnections: a flood of streams
// that never send their message, over many connections, passes at most
// awaitShared + awaitOwn on each connection to grpc-go. A calm connection
// still has its first awaitOwn pass at once. As the server answers some,
// held ones pass in their place, within the same bound.
func TestGuardBoundsWaitingStreamsAcrossConnections(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGuard(Bounds{}, nil)
		const conns = 2 * awaitShared / awaitFree // twice what fills the listener
		flood := floodGuard(t, g, conns)
		bound := awaitShared + awaitOwn*(conns+1)
		if n := sumPassed(flood); n > bound || n < awaitShared {
			t.Fatalf("%d of %d stalled streams passed, want %d to %d", n, conns*awaitFree, awaitShared, bound)
		}
		calm := dialGuard(t, g)
		calm.send(stalled(1, awaitOwn))
		synctest.Wait()
		if got := len(calm.passed()); got != awaitOwn {
			t.Fatalf("a calm connection's %d streams: %d passed, want all", awaitOwn, got)
		}
		// The server answers the streams of the half of the flood's
		// connections that passed the most: which ones won the shared
		// places depends on the schedule. The other half holds streams.
		slices.SortStableFunc(flood, func(a, b *pipeClient) int { return len(b.passed()) - len(a.passed()) })
		answered, rest := flood[:conns/2], flood[conns/2:]
		if n := sumPassed(rest); n >= len(rest)*awaitFree {
			t.Fatalf("the connections that passed the fewest streams passed all %d of theirs", n)
		}
		ends := 0
		for _, pc := range answered {
			for _, id := range pc.passed() {
				if _, err := pc.c.Write(frame(frameHeaders, flagEndStream|flagEndHeaders, id, 2)); err != nil {
					t.Fatal(err)
				}
				ends++
			}
		}
		before := sumPassed(rest)
		time.Sleep(time.Second) // the pacer
		synctest.Wait()
		after := sumPassed(rest)
		if after <= before {
			t.Fatalf("%d streams passed after the answers, %d before: held streams never passed", after, before)
		}
		if waiting := sumPassed(flood) - ends + len(calm.passed()); waiting > bound {
			t.Fatalf("%d streams await their message, want at most %d", waiting, bound)
		}
	})
}

// TestGuardHeldConnectionSeesItsClientLeave: a connection whose stream
// waits for room among the listener's streams still reads its client. A
// client that leaves is seen at once: the read fails, the connection
// closes, and its streams no longer count.
func TestGuardHeldConnectionSeesItsClientLeave(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGuard(Bounds{}, nil)
		flood := floodGuard(t, g, 2*awaitShared/awaitFree)
		held := waitingClient(t, flood)
		held.leave()
		synctest.Wait() // no time passes
		select {
		case <-held.done:
		default:
			t.Fatal("the connection still waits for room after its client left")
		}
		// The places it freed may be taken again by the flood's waiters:
		// the count is exactly the other connections' counted streams.
		others := int64(0)
		for _, pc := range flood {
			if pc != held {
				others += counted(pc)
			}
		}
		if n := g.waiting.Load(); n != others || counted(held) != 0 {
			t.Fatalf("%d streams counted after the client left, want the others' %d; its own still counted: %d",
				n, others, counted(held))
		}
		for _, pc := range flood {
			pc.leave()
		}
		synctest.Wait()
		if n := g.waiting.Load(); n != 0 {
			t.Fatalf("%d streams counted after every client left, want 0", n)
		}
	})
}

// TestGuardReadAheadIsBounded: while a stream waits for room, the guard
// reads at most readAhead bytes ahead of it, however much the client
// writes. They reach grpc-go, in order, once the stream passes.
func TestGuardReadAheadIsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGuard(Bounds{}, nil)
		flood := floodGuard(t, g, 2*awaitShared/awaitFree)
		held := waitingClient(t, flood)
		const pings = 4 * readAhead / (frameHeaderLen + 8)
		var in []byte
		for range pings {
			in = append(in, frame(0x6, 0, 0, 8)...) // PING
		}
		held.send(in)
		synctest.Wait()
		if n := held.c.ahead; n > readAhead {
			t.Fatalf("%d bytes read ahead, want at most %d", n, readAhead)
		}
		if n := len(held.c.held); n == 0 || n > 32<<10+readAhead {
			t.Fatalf("%d bytes held, want 1 to %d (one read and the read-ahead)", n, 32<<10+readAhead)
		}
		// Room: every other connection leaves. The held bytes pass.
		for _, pc := range flood {
			if pc != held {
				pc.leave()
			}
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if got := len(held.passed()); got != awaitFree {
			t.Fatalf("%d of %d streams passed once there was room", got, awaitFree)
		}
		held.mu.Lock()
		tail := held.got[len(held.got)-len(in):]
		held.mu.Unlock()
		if string(tail) != string(in) {
			t.Fatal("the bytes read ahead reached grpc-go out of order")
		}
	})
}

// TestGuardReleasesHoldBuffers: once grpc-go has read a held stream's
// bytes, the connection keeps no buffer for them.
func TestGuardReleasesHoldBuffers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGuard(Bounds{}, nil)
		pc := dialGuard(t, g)
		// Streams past awaitFree are held for the pacer, then pass.
		pc.send(stalled(1, awaitFree+pacedBurst+2))
		time.Sleep(time.Second)
		synctest.Wait()
		if got := len(pc.passed()); got != awaitFree+pacedBurst+2 {
			t.Fatalf("%d of %d streams passed", got, awaitFree+pacedBurst+2)
		}
		if pc.c.nheld.Load() == 0 {
			t.Fatal("no stream was held")
		}
		if pc.c.bufs != [2]*[]byte{} || pc.c.held != nil {
			t.Fatalf("the connection keeps its hold buffers (%v, %d bytes held) once they are read", pc.c.bufs, len(pc.c.held))
		}
	})
}

// TestGuardWaiterPassesWhenItsOwnStreamsEnd: a stream waits for room only
// while its connection has more than awaitOwn streams awaiting their
// message. When the server ends the others, it passes, though the listener
// is still full and the connection's read-ahead is full (no byte of its
// client wakes it).
func TestGuardWaiterPassesWhenItsOwnStreamsEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGuard(Bounds{}, nil)
		floodGuard(t, g, awaitShared/(awaitFree-awaitOwn)+1) // the listener's places, taken
		pc := dialGuard(t, g)
		in := stalled(1, awaitOwn+1)
		for range 4 * readAhead / (frameHeaderLen + 8) {
			in = append(in, frame(0x6, 0, 0, 8)...) // PING: fills the read-ahead
		}
		pc.send(in)
		time.Sleep(time.Second) // the pacer
		synctest.Wait()
		if got := len(pc.passed()); got != awaitOwn {
			t.Fatalf("%d streams passed, want %d: the listener is full", got, awaitOwn)
		}
		if pc.c.ahead < readAhead {
			t.Fatalf("%d bytes read ahead, want the read-ahead full (%d)", pc.c.ahead, readAhead)
		}
		for _, id := range pc.passed() { // the server answers them
			if _, err := pc.c.Write(frame(frameHeaders, flagEndStream|flagEndHeaders, id, 2)); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if got := len(pc.passed()); got != awaitOwn+1 {
			t.Fatalf("%d streams passed once the others ended, want %d", got, awaitOwn+1)
		}
	})
}

// TestGuardOwnStreamsTakeNoSharedPlace: a connection's first awaitOwn
// streams awaiting their message take none of the listener's places. A
// flood of connections that each stall awaitOwn streams, under the stall
// rate, fills nothing: another connection's streams past its own
// awaitOwn still pass at once.
func TestGuardOwnStreamsTakeNoSharedPlace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGuard(Bounds{}, nil)
		for range 2 * awaitShared / awaitOwn {
			dialGuard(t, g).send(stalled(1, awaitOwn))
		}
		synctest.Wait()
		if n := g.waiting.Load(); n != 0 {
			t.Fatalf("%d of the listener's places taken by connections' own streams, want 0", n)
		}
		pc := dialGuard(t, g)
		pc.send(stalled(1, awaitOwn+2))
		time.Sleep(time.Second) // the pacer
		synctest.Wait()
		if got := len(pc.passed()); got != awaitOwn+2 {
			t.Fatalf("%d of %d streams passed, want all: the listener has room", got, awaitOwn+2)
		}
		if n := g.waiting.Load(); n != 2 {
			t.Fatalf("%d places taken, want 2", n)
		}
	})
}
