package logs_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	klogs "github.com/sundial-go/sundial/kernel/logs"
	"github.com/sundial-go/sundial/kernel/logs/logstest"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
)

// TestLogSamplerBoundsAFlood: of 100 events at once, SampleBurst get a
// record each; one summary SampleSummaryAfter after the first of the
// others counts them; then records come at SampleRate a second.
func TestLogSamplerBoundsAFlood(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var sums []int64
		s := klogs.NewSampler(func(n int64, within time.Duration) {
			if within != logstest.SampleSummaryAfter {
				t.Errorf("summary window %v, want %v", within, logstest.SampleSummaryAfter)
			}
			mu.Lock()
			sums = append(sums, n)
			mu.Unlock()
		})
		summaries := func() []int64 {
			mu.Lock()
			defer mu.Unlock()
			return append([]int64(nil), sums...)
		}
		own := 0
		for range 100 {
			if s.Allow() {
				own++
			}
		}
		s.Suppress()
		if own != logstest.SampleBurst {
			t.Fatalf("%d of 100 events allowed at once, want %d", own, logstest.SampleBurst)
		}
		time.Sleep(logstest.SampleSummaryAfter - time.Nanosecond)
		synctest.Wait()
		if sums := summaries(); len(sums) != 0 {
			t.Fatalf("summaries %v before one is due", sums)
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if sums := summaries(); len(sums) != 1 || sums[0] != 100-int64(own)+1 {
			t.Fatalf("summaries %v, want one of %d", sums, 100-own+1)
		}
		// The burst is back; then 100 events a second for 5 s spend it by
		// 0.09 s and get one more at 1.09, 2.09, 3.09 and 4.09 s.
		own = 0
		for range 500 {
			if s.Allow() {
				own++
			}
			time.Sleep(10 * time.Millisecond)
		}
		if want := logstest.SampleBurst + 4; own != want {
			t.Errorf("%d of 500 events over 5 s allowed, want %d", own, want)
		}
	})
}

// TestSampledLogger: a sampled logger writes the records its sampler
// allows, through loggers derived with With too, and one summary with the
// count of the others; records below the logger's level cost nothing.
func TestSampledLogger(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs pipelinetest.LogSink
		base := slog.New(warnOnly{logs.Logger().Handler()})
		l := klogs.Sampled(base, slog.LevelWarn, "flood")
		for i := range 30 {
			l.Info("below the level")
			l.With("i", i).Warn("flood")
		}
		if n := len(logs.Records()); n != logstest.SampleBurst {
			t.Fatalf("%d records of 30, want %d", n, logstest.SampleBurst)
		}
		time.Sleep(logstest.SampleSummaryAfter)
		synctest.Wait()
		recs := logs.Records()
		last := recs[len(recs)-1]
		if len(recs) != logstest.SampleBurst+1 || last.Attrs["suppressed"] != int64(20) || last.Level != slog.LevelWarn {
			t.Fatalf("records %+v, want a summary at WARN of 20 after %d", recs, logstest.SampleBurst)
		}
		if klogs.Sampled(nil, slog.LevelWarn, "x") != nil {
			t.Error("Sampled(nil) is not nil")
		}
	})
}

// warnOnly passes on records at Warn and above.
type warnOnly struct{ slog.Handler }

func (h warnOnly) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }

func (h warnOnly) WithAttrs(as []slog.Attr) slog.Handler { return warnOnly{h.Handler.WithAttrs(as)} }
