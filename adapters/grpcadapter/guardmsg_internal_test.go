package grpcadapter

import (
	"testing"
	"testing/synctest"
	"time"
)

// begun returns n streams' HEADERS frames, each followed by one byte of
// its message, the first with id first.
func begun(first uint32, n int) []byte {
	var b []byte
	for i := range n {
		id := first + 2*uint32(i)
		b = append(b, frame(frameHeaders, flagEndHeaders, id, 3)...)
		b = append(b, frame(frameData, 0, id, 1)...)
	}
	return b
}

// TestGuardCountsAStreamUntilItsMessageIsComplete: a stream awaits its
// message until the whole message has come, not its first byte. A flood
// of streams that each send one byte and stall is bounded as one that
// sends none: at most awaitShared + awaitOwn on each connection pass.
func TestGuardCountsAStreamUntilItsMessageIsComplete(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGuard(Bounds{}, nil)
		const conns = 2 * awaitShared / awaitFree // twice what fills the listener
		var flood []*pipeClient
		for range conns {
			pc := dialGuard(t, g)
			pc.send(begun(1, 2*awaitFree))
			flood = append(flood, pc)
		}
		time.Sleep(time.Second) // the pacer
		synctest.Wait()
		bound := awaitShared + awaitOwn*conns
		if n := sumPassed(flood); n > bound {
			t.Fatalf("%d of %d streams that sent one byte passed, want at most %d", n, conns*2*awaitFree, bound)
		}
		if n := g.waiting.Load(); n != awaitShared {
			t.Fatalf("%d streams counted, want the listener full (%d)", n, awaitShared)
		}
	})
}

// TestGuardMessageEndsTheWait: a stream no longer awaits its message
// once the message is complete, whatever the DATA frames that carry it
// (split, padded); a stream whose message is cut short still awaits it.
func TestGuardMessageEndsTheWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGuard(Bounds{}, nil)
		pc := dialGuard(t, g)
		const streams = awaitOwn + 2
		var in []byte
		for i := range streams {
			id := 1 + 2*uint32(i)
			in = append(in, frame(frameHeaders, flagEndHeaders, id, 3)...)
			// The prefix (a flag and the length 3) over two frames, the
			// second padded with 2 bytes, then the message.
			in = append(in, frame(frameData, 0, id, 3)...)
			f := frame(frameData, flagPadded, id, 1+2+3+2)
			f[frameHeaderLen] = 2             // the pad length
			f[frameHeaderLen+2] = 3           // the length's last byte
			copy(f[frameHeaderLen+3:], "abc") // the message
			in = append(in, f...)
		}
		// A stream whose message stops after its prefix and a byte.
		short := uint32(1 + 2*streams)
		in = append(in, frame(frameHeaders, flagEndHeaders, short, 3)...)
		f := frame(frameData, 0, short, msgPrefixLen+1)
		f[frameHeaderLen+msgPrefixLen-1] = 9
		in = append(in, f...)
		pc.send(in)
		synctest.Wait()
		if got := len(pc.passed()); got != streams+1 {
			t.Fatalf("%d of %d streams passed", got, streams+1)
		}
		pc.c.mu.Lock()
		_, waits := pc.c.await[short]
		left := len(pc.c.await)
		pc.c.mu.Unlock()
		if left != 1 || !waits {
			t.Fatalf("%d streams await their message, want 1: the one cut short (%v)", left, waits)
		}
		if n := g.waiting.Load(); n != 0 {
			t.Fatalf("%d of the listener's places taken, want 0", n)
		}
	})
}
