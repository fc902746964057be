package asynclog_test

import (
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

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
	h := asynclog.New(slog.NewJSONHandler(b, nil), asynclog.WithFlush(b.Flush, 0))
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

// A record after a quiet spell is written as soon as the writer goroutine
// has handled it. One soon after waits for the rest of the flush's wait,
// not for a later record or for Close.
func TestLoneRecordIsWrittenAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf syncBuffer
		b := asynclog.NewBatch(&buf, 64<<10)
		const wait = 10 * time.Millisecond
		h := asynclog.New(slog.NewJSONHandler(b, nil), asynclog.WithFlush(b.Flush, wait))
		defer closeNow(t, h)
		l := slog.New(h)
		l.Info("alone")
		synctest.Wait()
		if lines := buf.lines(t); len(lines) != 1 || lines[0]["msg"] != "alone" {
			t.Fatalf("wrote %v before Close, want the record", lines)
		}
		time.Sleep(wait / 2)
		l.Info("soon")
		synctest.Wait()
		if n := len(buf.lines(t)); n != 1 {
			t.Fatalf("%d lines %v after the last flush, want 1: the next waits", n, wait/2)
		}
		time.Sleep(wait / 2)
		synctest.Wait()
		if lines := buf.lines(t); len(lines) != 2 || lines[1]["msg"] != "soon" {
			t.Fatalf("wrote %v once the wait passed, want both records", lines)
		}
	})
}

// Records a millisecond apart, each alone in the queue, reach the
// destination in one Write per wait, not one each.
func TestTrickleIsWrittenOncePerWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf syncBuffer
		cw := &countingWriter{w: &buf}
		b := asynclog.NewBatch(cw, 64<<10)
		const wait = 10 * time.Millisecond
		h := asynclog.New(slog.NewJSONHandler(b, nil), asynclog.WithFlush(b.Flush, wait))
		defer closeNow(t, h)
		l := slog.New(h)
		const records = 100
		for i := range records {
			l.Info("n", "i", i)
			synctest.Wait() // the writer has handled it: the queue is empty
			time.Sleep(time.Millisecond)
		}
		time.Sleep(wait)
		synctest.Wait()
		if n, most := cw.count(), records*time.Millisecond/wait+1; n > int(most) {
			t.Fatalf("%d records a millisecond apart in %d writes, want at most %d", records, n, most)
		}
		lines := buf.lines(t)
		if len(lines) != records {
			t.Fatalf("wrote %d lines, want %d", len(lines), records)
		}
		for k, m := range lines {
			if m["i"] != float64(k) {
				t.Fatalf("line %d = %v, want i=%d", k, m, k)
			}
		}
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
