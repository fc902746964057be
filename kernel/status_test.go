package kernel

import (
	"testing"
	"time"
)

// TestLatencyQuantiles: p50 and p99 from the log-scaled buckets are within
// one bucket (19 %) above the true value, never below it.
func TestLatencyQuantiles(t *testing.T) {
	now := time.Now()
	l := newLatency(now)
	for i := 1; i <= 1000; i++ {
		l.observe(now, time.Duration(i)*time.Millisecond/10) // 0.1 ms .. 100 ms
	}
	calls, p50, p99 := l.snapshot(now)
	if calls != 1000 {
		t.Fatalf("calls = %d", calls)
	}
	check := func(name string, got, want time.Duration) {
		if got < want || float64(got) > 1.19*float64(want) {
			t.Errorf("%s = %v, want within [%v, %v]", name, got, want, time.Duration(1.19*float64(want)))
		}
	}
	check("p50", p50, 50*time.Millisecond)
	check("p99", p99, 99*time.Millisecond)
	// Periods roll over: 61 s later nothing is left.
	if c, _, _ := l.snapshot(now.Add(61 * time.Second)); c != 0 {
		t.Fatalf("%d calls reported 61 s later", c)
	}
	l.observe(now.Add(31*time.Second), time.Millisecond)
	if c, _, _ := l.snapshot(now.Add(31 * time.Second)); c != 1001 {
		t.Fatalf("after a rollover: %d calls, want the previous period's 1000 and the new one", c)
	}
}

func TestLatencyBuckets(t *testing.T) {
	prev := -1
	for d := time.Microsecond; d < time.Hour; d = d*9/8 + 1 {
		b := bucket(d)
		if b < prev || upper(b) < d {
			t.Fatalf("bucket(%v) = %d (upper %v), previous %d", d, b, upper(b), prev)
		}
		prev = b
	}
}
