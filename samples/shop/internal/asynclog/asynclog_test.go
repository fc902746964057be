package asynclog_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/slogtest"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/sundial-go/sundial/samples/shop/internal/asynclog"
)

// blockingWriter is a destination that stops accepting bytes: every Write
// waits until release is closed (stderr piped to a reader that stopped
// reading). entered receives once, on the first Write.
type blockingWriter struct {
	release chan struct{}
	entered chan struct{}
	once    sync.Once

	mu  sync.Mutex
	buf bytes.Buffer
}

func newBlockingWriter() *blockingWriter {
	return &blockingWriter{release: make(chan struct{}), entered: make(chan struct{})}
}

func (w *blockingWriter) Write(p []byte) (int, error) {
	w.once.Do(func() { close(w.entered) })
	<-w.release
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

func (w *blockingWriter) lines(t *testing.T) []map[string]any {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	return parseLines(t, w.buf.Bytes())
}

// syncBuffer is a destination that always accepts bytes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) lines(t *testing.T) []map[string]any {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	return parseLines(t, b.buf.Bytes())
}

func parseLines(t *testing.T, data []byte) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		out = append(out, m)
	}
	return out
}

func closeNow(t *testing.T, h *asynclog.Handler) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// blockWriter logs one record and waits until the writer goroutine is stuck
// inside Write with it: from then on the queue is empty and nothing leaves
// it, so what fits and what is dropped is exact.
func blockWriter(t *testing.T, l *slog.Logger, w *blockingWriter) {
	t.Helper()
	l.Info("first")
	select {
	case <-w.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the writer goroutine never wrote the first record")
	}
}

// With stderr blocked a server must not freeze. Here the destination
// blocks forever, 8 goroutines log 10,000 records, and every call returns
// at once (in a synctest bubble: no time passes); what did not fit is
// counted exactly, and once the destination accepts bytes again the
// accepted records come out in order, followed by one drop report.
func TestBlockedWriterNeverBlocksHandle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const (
			queue      = asynclog.DefaultQueue
			goroutines = 8
			perG       = 1250
			total      = goroutines * perG
		)
		w := newBlockingWriter()
		released := false
		release := func() {
			if !released {
				released = true
				close(w.release)
			}
		}
		defer release()
		// No periodic report: with an hour's interval the report comes when
		// the queue drains, after every accepted record.
		h := asynclog.New(slog.NewJSONHandler(w, nil), asynclog.WithReportInterval(time.Hour))
		l := slog.New(h)
		blockWriter(t, l, w)

		var (
			wg       sync.WaitGroup
			accepted [goroutines][]int
			maxCall  [goroutines]time.Duration
			dropped  [goroutines]int
		)
		start := time.Now()
		for g := range goroutines {
			wg.Go(func() {
				ctx := context.Background()
				for i := range perG {
					r := slog.NewRecord(time.Now(), slog.LevelInfo, "access", 0)
					r.AddAttrs(slog.Int("g", g), slog.Int("i", i))
					t0 := time.Now()
					err := h.Handle(ctx, r)
					if d := time.Since(t0); d > maxCall[g] {
						maxCall[g] = d
					}
					switch {
					case err == nil:
						accepted[g] = append(accepted[g], i)
					case errors.Is(err, asynclog.ErrDropped):
						dropped[g]++
					default:
						t.Errorf("Handle: %v", err)
					}
				}
			})
		}
		wg.Wait()
		elapsed := time.Since(start)
		var worst time.Duration
		nAccepted, nDropped := 0, 0
		for g := range goroutines {
			worst = max(worst, maxCall[g])
			nAccepted += len(accepted[g])
			nDropped += dropped[g]
		}
		t.Logf("blocked writer: %d Handle calls from %d goroutines in %v, slowest call %v; accepted %d (queue %d), dropped %d, Dropped() = %d",
			total, goroutines, elapsed, worst, nAccepted, queue, nDropped, h.Dropped())
		// In the bubble time passes only when every goroutine waits: a Handle
		// waiting on the writer would never return (the bubble deadlocks), one
		// waiting on a timer would take time.
		if elapsed != 0 || worst != 0 {
			t.Errorf("%d Handle calls took %v (slowest %v) with the writer blocked, want no time at all", total, elapsed, worst)
		}
		if nAccepted != queue {
			t.Errorf("accepted %d records, want exactly the queue (%d)", nAccepted, queue)
		}
		if want := uint64(total - queue); h.Dropped() != want || uint64(nDropped) != want {
			t.Errorf("Dropped() = %d, ErrDropped returned %d times, want %d", h.Dropped(), nDropped, want)
		}

		release()
		closeNow(t, h)

		lines := w.lines(t)
		if len(lines) != 1+queue+1 {
			t.Fatalf("wrote %d lines, want first + %d accepted + drop report", len(lines), queue)
		}
		if lines[0]["msg"] != "first" {
			t.Errorf("line 0 = %v, want the first record", lines[0])
		}
		next := [goroutines]int{}
		for _, m := range lines[1 : 1+queue] {
			if m["msg"] != "access" {
				t.Fatalf("got %v among the accepted records", m)
			}
			g, i := int(m["g"].(float64)), int(m["i"].(float64))
			if next[g] >= len(accepted[g]) || accepted[g][next[g]] != i {
				t.Fatalf("goroutine %d: record %d written out of order or never accepted (next accepted %v)", g, i, accepted[g][next[g]:min(next[g]+3, len(accepted[g]))])
			}
			next[g]++
		}
		last := lines[len(lines)-1]
		want := fmt.Sprintf("asynclog: dropped %d records", total-queue)
		if last["msg"] != want || last["level"] != "WARN" || last["dropped"] != float64(total-queue) {
			t.Errorf("last line = %v, want the drop report %q", last, want)
		}
	})
}

// One goroutine, a small queue: the records are written exactly in the order
// they were accepted, then the drop report.
func TestOrderAndDropReportAfterDrain(t *testing.T) {
	w := newBlockingWriter()
	defer func() {
		select {
		case <-w.release:
		default:
			close(w.release)
		}
	}()
	h := asynclog.New(slog.NewJSONHandler(w, nil), asynclog.WithQueue(16), asynclog.WithReportInterval(time.Hour))
	l := slog.New(h)
	blockWriter(t, l, w)
	for i := range 100 {
		l.Info("n", "i", i)
	}
	if h.Dropped() != 100-16 {
		t.Fatalf("Dropped() = %d, want %d", h.Dropped(), 100-16)
	}
	close(w.release)
	closeNow(t, h)
	lines := w.lines(t)
	if len(lines) != 1+16+1 {
		t.Fatalf("wrote %d lines, want 18", len(lines))
	}
	for k, m := range lines[1:17] {
		if m["i"] != float64(k) {
			t.Fatalf("line %d = %v, want i=%d", k+1, m, k)
		}
	}
	if got := lines[17]["msg"]; got != "asynclog: dropped 84 records" {
		t.Errorf("last line msg = %v", got)
	}
}

// While the queue never drains, drops are reported at most every interval;
// with a tiny interval, right after the record in progress.
func TestDropReportWhileQueueBusy(t *testing.T) {
	w := newBlockingWriter()
	h := asynclog.New(slog.NewJSONHandler(w, nil), asynclog.WithQueue(4), asynclog.WithReportInterval(time.Nanosecond))
	l := slog.New(h)
	blockWriter(t, l, w)
	for i := range 7 {
		l.Info("n", "i", i)
	}
	close(w.release)
	closeNow(t, h)
	lines := w.lines(t)
	var msgs []string
	for _, m := range lines {
		msgs = append(msgs, m["msg"].(string))
	}
	want := []string{"first", "asynclog: dropped 3 records", "n", "n", "n", "n"}
	if strings.Join(msgs, "|") != strings.Join(want, "|") {
		t.Errorf("lines = %q, want %q", msgs, want)
	}
}

// Derived handlers share the queue: attributes and groups are those of the
// handler that accepted the record, and the tree keeps one order.
func TestWithAttrsAndGroup(t *testing.T) {
	var b syncBuffer
	h := asynclog.New(slog.NewJSONHandler(&b, nil))
	root := slog.New(h)
	svc := root.With("svc", "shop")
	req := svc.WithGroup("req").With("id", 7)
	root.Info("a")
	req.Info("b", "status", 200)
	svc.Info("c")
	req.WithGroup("").Info("d")
	closeNow(t, h)

	lines := b.lines(t)
	if len(lines) != 4 {
		t.Fatalf("wrote %d lines, want 4", len(lines))
	}
	for k, msg := range []string{"a", "b", "c", "d"} {
		if lines[k]["msg"] != msg {
			t.Errorf("line %d msg = %v, want %s", k, lines[k]["msg"], msg)
		}
	}
	if _, ok := lines[0]["svc"]; ok {
		t.Errorf("root record has svc: %v", lines[0])
	}
	for _, k := range []int{1, 2, 3} {
		if lines[k]["svc"] != "shop" {
			t.Errorf("line %d lacks svc=shop: %v", k, lines[k])
		}
	}
	g, _ := lines[1]["req"].(map[string]any)
	if g["id"] != float64(7) || g["status"] != float64(200) {
		t.Errorf("line 1 req group = %v, want id=7 status=200", lines[1]["req"])
	}
	if _, ok := lines[2]["req"]; ok {
		t.Errorf("svc record has a req group: %v", lines[2])
	}
}

// Close with an ended context returns its error at once, even with the
// writer stuck; the queued records are then dropped and counted, and the
// goroutine exits as soon as the stuck write returns.
func TestCloseExpiredContext(t *testing.T) {
	w := newBlockingWriter()
	h := asynclog.New(slog.NewJSONHandler(w, nil), asynclog.WithQueue(8))
	l := slog.New(h)
	blockWriter(t, l, w)
	for i := range 5 {
		l.Info("queued", "i", i)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	err := h.Close(ctx)
	t.Logf("Close with a 10ms deadline and the writer stuck returned %v after %v", err, time.Since(t0))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close = %v, want %v", err, context.DeadlineExceeded)
	}
	if err := l.Handler().Handle(context.Background(), slog.NewRecord(time.Now(), slog.LevelInfo, "late", 0)); !errors.Is(err, asynclog.ErrClosed) {
		t.Errorf("Handle after Close = %v, want ErrClosed", err)
	}

	close(w.release) // the test's end: the destination accepts bytes again
	closeNow(t, h)   // waits for the goroutine
	goleak.VerifyNone(t)
	lines := w.lines(t)
	if len(lines) != 1 || lines[0]["msg"] != "first" {
		t.Errorf("wrote %v, want only the record that was in progress", lines)
	}
	if h.Dropped() != 5+1 {
		t.Errorf("Dropped() = %d, want 6 (5 abandoned, 1 after Close)", h.Dropped())
	}
}

// Close with an already cancelled context and the writer stuck returns
// context.Canceled; a second Close, once the writer is released, waits for
// the goroutine.
func TestCloseCancelledContext(t *testing.T) {
	w := newBlockingWriter()
	h := asynclog.New(slog.NewJSONHandler(w, nil))
	blockWriter(t, slog.New(h), w)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := h.Close(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Close = %v, want context.Canceled", err)
	}
	close(w.release)
	closeNow(t, h)
	goleak.VerifyNone(t)
}

// Logging concurrently with Close never panics, and every record Handle
// accepted is written: written = calls - Dropped().
func TestConcurrentHandleAndClose(t *testing.T) {
	var b syncBuffer
	h := asynclog.New(slog.NewJSONHandler(&b, nil), asynclog.WithQueue(64), asynclog.WithReportInterval(time.Hour))
	l := slog.New(h)
	const goroutines, perG = 8, 2000
	var wg, half sync.WaitGroup
	half.Add(goroutines)
	for g := range goroutines {
		wg.Go(func() {
			for i := range perG {
				if i == perG/2 {
					half.Done()
				}
				l.Info("x", "g", g, "i", i)
			}
		})
	}
	half.Wait() // Close while every goroutine is mid-way
	closeNow(t, h)
	wg.Wait()
	n := 0
	for _, m := range b.lines(t) {
		if m["msg"] == "x" {
			n++
		}
	}
	t.Logf("Close during %d calls: %d written, %d dropped", goroutines*perG, n, h.Dropped())
	if uint64(n)+h.Dropped() != goroutines*perG {
		t.Errorf("written %d + dropped %d != %d calls", n, h.Dropped(), goroutines*perG)
	}
}

type ctxHandler struct {
	slog.Handler
	got chan context.Context
}

func (c ctxHandler) Handle(ctx context.Context, r slog.Record) error {
	c.got <- ctx
	return nil
}

type key struct{}

// The record is written after the request ended: the wrapped handler gets
// the caller's values without its cancellation.
func TestContextValuesWithoutCancel(t *testing.T) {
	inner := ctxHandler{Handler: slog.DiscardHandler, got: make(chan context.Context, 1)}
	h := asynclog.New(inner)
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), key{}, "trace-1"))
	cancel()
	if err := h.Handle(ctx, slog.NewRecord(time.Now(), slog.LevelInfo, "m", 0)); err != nil {
		t.Fatal(err)
	}
	closeNow(t, h)
	got := <-inner.got
	if got.Value(key{}) != "trace-1" || got.Err() != nil {
		t.Errorf("wrapped handler got value %v, err %v; want trace-1, nil", got.Value(key{}), got.Err())
	}
}

func TestEnabledDelegates(t *testing.T) {
	h := asynclog.New(slog.NewJSONHandler(&syncBuffer{}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	defer closeNow(t, h)
	ctx := context.Background()
	if h.Enabled(ctx, slog.LevelInfo) || !h.Enabled(ctx, slog.LevelWarn) {
		t.Error("Enabled does not follow the wrapped handler's level")
	}
	if h.WithGroup("g").Enabled(ctx, slog.LevelInfo) {
		t.Error("a derived handler's Enabled does not follow the wrapped handler's level")
	}
}

// The wrapped handler's slog conformance survives the wrapping, once
// flushed.
func TestSlogtest(t *testing.T) {
	type pair struct {
		b *syncBuffer
		h *asynclog.Handler
	}
	var mu sync.Mutex
	handlers := map[*testing.T]pair{}
	slogtest.Run(t,
		func(t *testing.T) slog.Handler {
			b := &syncBuffer{}
			h := asynclog.New(slog.NewJSONHandler(b, nil))
			mu.Lock()
			handlers[t] = pair{b, h}
			mu.Unlock()
			return h
		},
		func(t *testing.T) map[string]any {
			mu.Lock()
			p := handlers[t]
			mu.Unlock()
			closeNow(t, p.h)
			lines := p.b.lines(t)
			if len(lines) != 1 {
				t.Fatalf("got %d lines, want 1", len(lines))
			}
			return lines[0]
		})
}

func BenchmarkHandle(b *testing.B) {
	h := asynclog.New(slog.NewJSONHandler(&syncBuffer{}, nil), asynclog.WithReportInterval(time.Hour))
	defer h.Close(context.Background())
	l := slog.New(h)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			l.Info("access", "status", 200, "path", "/orders")
		}
	})
	b.ReportMetric(float64(h.Dropped()), "dropped")
}
