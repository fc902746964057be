package asynclog_test

import (
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/sundial-go/sundial/samples/shop/internal/asynclog"
)

// countingWriter records each Write it gets, whole.
type countingWriter struct {
	w      io.Writer
	mu     sync.Mutex
	writes []string
}

func (c *countingWriter) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.writes = append(c.writes, string(p))
	c.mu.Unlock()
	return c.w.Write(p)
}

func (c *countingWriter) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.writes)
}

// A burst of records that queue while the writer is busy reaches the
// destination in one Write, in order.
func TestBurstIsWrittenAtOnce(t *testing.T) {
	w := newBlockingWriter()
	cw := &countingWriter{w: w}
	b := asynclog.NewBatch(cw, 64<<10)
	h := asynclog.New(slog.NewJSONHandler(b, nil), asynclog.WithFlush(b.Flush))
	l := slog.New(h)
	blockWriter(t, l, w) // the first record, alone, in a Write that waits
	const burst = 100
	for i := range burst {
		l.Info("n", "i", i)
	}
	close(w.release)
	closeNow(t, h)
	if n := cw.count(); n != 2 {
		t.Fatalf("%d records in %d writes, want 2: the first, then the burst", 1+burst, n)
	}
	lines := w.lines(t)
	if len(lines) != 1+burst {
		t.Fatalf("wrote %d lines, want %d", len(lines), 1+burst)
	}
	for k, m := range lines[1:] {
		if m["i"] != float64(k) {
			t.Fatalf("line %d = %v, want i=%d", k+1, m, k)
		}
	}
}

// A record alone is written as soon as the writer goroutine has handled
// it: nothing waits for a later record or for Close.
func TestLoneRecordIsWrittenAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf syncBuffer
		b := asynclog.NewBatch(&buf, 64<<10)
		h := asynclog.New(slog.NewJSONHandler(b, nil), asynclog.WithFlush(b.Flush))
		slog.New(h).Info("alone")
		synctest.Wait()
		if lines := buf.lines(t); len(lines) != 1 || lines[0]["msg"] != "alone" {
			t.Fatalf("wrote %v before Close, want the record", lines)
		}
		closeNow(t, h)
	})
}

// A Batch never splits a Write between two of its destination's: what
// does not fit flushes what it keeps first, and a Write larger than the
// buffer goes out alone.
func TestBatchKeepsWritesWhole(t *testing.T) {
	var sb strings.Builder
	cw := &countingWriter{w: &sb}
	b := asynclog.NewBatch(cw, 10)
	for _, p := range []string{"aaaa\n", "bbbb\n", "cccc\n", strings.Repeat("d", 20) + "\n", "eeee\n"} {
		if n, err := b.Write([]byte(p)); n != len(p) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", p, n, err)
		}
	}
	if err := b.Flush(); err != nil {
		t.Fatal(err)
	}
	want := []string{"aaaa\nbbbb\n", "cccc\n", strings.Repeat("d", 20) + "\n", "eeee\n"}
	if strings.Join(cw.writes, "|") != strings.Join(want, "|") {
		t.Fatalf("writes %q, want %q", cw.writes, want)
	}
}
