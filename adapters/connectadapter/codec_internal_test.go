package connectadapter

import (
	"bytes"
	"compress/gzip"
	"io"
	"testing"
)

// TestGzipReaderStopsPastTheBound: whatever reads it, a bomb's reader
// yields at most one byte past the bound, so the rest is never inflated —
// connect-go reads on to the end to report the size, and would inflate
// all of it otherwise. Reset makes the reader whole again for the next.
func TestGzipReaderStopsPastTheBound(t *testing.T) {
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	_, _ = zw.Write(make([]byte, 8<<20))
	_ = zw.Close()
	r := boundedGzip(1 << 20)()
	for range 2 {
		if err := r.Reset(bytes.NewReader(z.Bytes())); err != nil {
			t.Fatal(err)
		}
		n, err := io.Copy(io.Discard, io.LimitReader(r, 1<<20+1))
		if err != nil || n != 1<<20+1 {
			t.Fatalf("first read: %d bytes, %v; want the bound plus one", n, err)
		}
		if rest, err := io.Copy(io.Discard, r); rest != 0 || err != nil {
			t.Fatalf("read on past the bound: %d more bytes inflated, %v", rest, err)
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
	}
	// A message within the bound reads whole.
	z.Reset()
	zw.Reset(&z)
	_, _ = zw.Write([]byte("hello"))
	_ = zw.Close()
	_ = r.Reset(&z)
	if b, err := io.ReadAll(r); string(b) != "hello" || err != nil {
		t.Fatalf("small message: %q %v", b, err)
	}
}
