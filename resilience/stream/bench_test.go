package stream_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/sundial-go/sundial/resilience/stream"
)

// nopRaw sends and receives without blocking: what remains is the cost of
// the wrapper.
type nopRaw struct{ m any }

func (r *nopRaw) Send(any) error          { return nil }
func (r *nopRaw) Recv() (any, int, error) { return r.m, 64, nil }
func (r *nopRaw) Abort(error)             {}

// allClocks bounds a stream with every clock and bound that costs per
// message.
var allClocks = stream.Config{Kind: stream.Bidi, Idle: time.Minute, SendStall: time.Minute,
	MaxMessages: 1 << 62, MaxBytes: 1 << 62}

func BenchmarkSendRaw(b *testing.B) {
	raw := &nopRaw{m: new(int)}
	b.ReportAllocs()
	for b.Loop() {
		if err := raw.Send(raw.m); err != nil {
			b.Fatal(err)
		}
	}
}

// openAll opens a stream over a nopRaw with every clock and bound set.
func openAll() (*stream.Stream, *nopRaw) {
	raw := &nopRaw{m: new(int)}
	cfg := allClocks
	cfg.Deadline = time.Now().Add(time.Hour)
	return stream.Open(context.Background(), raw, cfg), raw
}

func BenchmarkSend(b *testing.B) {
	s, raw := openAll()
	defer s.Close(nil)
	b.ReportAllocs()
	for b.Loop() {
		if err := s.Send(raw.m); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRecvRaw(b *testing.B) {
	raw := &nopRaw{m: new(int)}
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := raw.Recv(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRecv(b *testing.B) {
	s, _ := openAll()
	defer s.Close(nil)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Recv(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkIdleStreams opens 10,000 streams with every clock armed under
// a cancellable parent and reports the bytes allocated and goroutines
// started for each: what an idle stream holds.
func BenchmarkIdleStreams(b *testing.B) {
	const n = 10_000
	parent, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := allClocks
	cfg.Deadline = time.Now().Add(time.Hour)
	for b.Loop() {
		b.StopTimer()
		streams := make([]*stream.Stream, n)
		raw := &nopRaw{}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		g := runtime.NumGoroutine()
		b.StartTimer()
		for i := range streams {
			streams[i] = stream.Open(parent, raw, cfg)
			streams[i].Context().Done() // what a handler waiting on it creates
		}
		b.StopTimer()
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/n, "alloc-B/stream")
		b.ReportMetric(float64(runtime.NumGoroutine()-g)/n, "goroutines/stream")
		for _, s := range streams {
			s.Close(nil)
		}
		b.StartTimer()
	}
}

// BenchmarkClock is one reading of the monotonic clock, as Send and Recv
// take it.
func BenchmarkClock(b *testing.B) {
	start := time.Now()
	var d time.Duration
	for b.Loop() {
		d += time.Since(start)
	}
	_ = d
}
