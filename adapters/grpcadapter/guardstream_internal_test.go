package grpcadapter

import (
	"bytes"
	"testing"
	"testing/synctest"
	"time"

	"golang.org/x/net/http2/hpack"
)

// headerFrames returns the HEADERS frames (no END_STREAM) of n streams
// from id on, to path, HPACK-coded by enc as a client's stub codes them.
// With split, each header block ends in a CONTINUATION frame, and each
// HEADERS frame is padded and has a priority.
func headerFrames(enc *hpack.Encoder, buf *bytes.Buffer, id uint32, n int, path string, split bool) []byte {
	var out []byte
	for range n {
		buf.Reset()
		for _, f := range []hpack.HeaderField{
			{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"},
			{Name: ":path", Value: path}, {Name: ":authority", Value: "127.0.0.1"},
			{Name: "content-type", Value: "application/grpc"}, {Name: "te", Value: "trailers"},
		} {
			_ = enc.WriteField(f)
		}
		blk := buf.Bytes()
		if !split {
			f := frame(frameHeaders, flagEndHeaders, id, len(blk))
			copy(f[frameHeaderLen:], blk)
			out = append(out, f...)
		} else {
			half := len(blk) / 2
			const pad = 3
			f := frame(frameHeaders, flagPadded|flagPriority, id, 1+5+half+pad)
			f[frameHeaderLen] = pad
			copy(f[frameHeaderLen+6:], blk[:half])
			out = append(out, f...)
			c := frame(frameContinuation, flagEndHeaders, id, len(blk)-half)
			copy(c[frameHeaderLen:], blk[half:])
			out = append(out, c...)
		}
		id += 2
	}
	return out
}

// TestGuardLetsCallerStreamsWait: a client or bidi stream may open and
// send nothing for a while. 100 such streams on one connection are
// neither held back nor counted as waiting for their message: their
// method, read from the header block's :path, says the caller streams.
// That holds for an adapter's bidi stream and for a generated one (the
// reflection service), for header blocks split over CONTINUATION frames,
// padded and with a priority, and for reads of any size. Streams of a
// unary method on the same connection are still paced past awaitFree.
func TestGuardLetsCallerStreamsWait(t *testing.T) {
	const chat = "/test.v1.Chat/Talk"
	streamMethods.Store(chat, true)
	defer streamMethods.Delete(chat)
	streamMethods.Store("/test.v1.Work/Run", false)
	defer streamMethods.Delete("/test.v1.Work/Run")
	for _, tc := range []struct {
		name  string
		path  string
		split bool
		chunk int // bytes per read; 0: all at once
	}{
		{"adapter bidi", chat, false, 0},
		{"generated bidi", "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", false, 0},
		{"continuation, padding, priority", chat, true, 0},
		{"one byte per read", chat, true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c, p := newTestConn(t, 0, 0)
				if _, err := feed(c, p, []byte(clientPreface)); err != nil {
					t.Fatal(err)
				}
				var buf bytes.Buffer
				enc := hpack.NewEncoder(&buf)
				in := headerFrames(enc, &buf, 1, 100, tc.path, tc.split)
				start := time.Now()
				chunk := tc.chunk
				if chunk == 0 {
					chunk = len(in)
				}
				for off := 0; off < len(in); off += chunk {
					b := in[off:min(off+chunk, len(in))]
					if n, err := feed(c, p, b); n != len(b) || err != nil {
						t.Fatalf("read %d of %d bytes at %d: %v", n, len(b), off, err)
					}
				}
				if d := time.Since(start); d != 0 {
					t.Errorf("100 caller streams took %v to read, want no wait", d)
				}
				if n := c.nheld.Load(); n != 0 {
					t.Errorf("%d caller streams held back, want 0", n)
				}
				c.mu.Lock()
				waiting := len(c.await)
				c.mu.Unlock()
				if waiting != 0 {
					t.Errorf("%d caller streams count as waiting for their message, want 0", waiting)
				}
				// Unary calls that stall on the same connection are paced
				// as ever: the first awaitFree pass, the next is held.
				unary := headerFrames(enc, &buf, 201, awaitFree+1, "/test.v1.Work/Run", tc.split)
				p.mu.Lock()
				p.in = append(p.in, unary)
				p.mu.Unlock()
				for got := 0; got < len(unary); {
					n, err := c.Read(make([]byte, len(unary)))
					if err != nil {
						t.Fatal(err)
					}
					got += n
				}
				if n := c.nheld.Load(); n != 1 {
					t.Errorf("%d unary streams held back, want 1 (the one past awaitFree %d)", n, awaitFree)
				}
				if c.hdec == nil {
					t.Error("the guard stopped decoding header blocks")
				}
			})
		})
	}
}
