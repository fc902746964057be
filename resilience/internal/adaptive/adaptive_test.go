package adaptive

import (
	"testing"
	"time"
)

// feed records n samples of latency rtt with inFlight in flight, spread
// over one window from *now, and returns the limit after it.
func feed(c *Controller, now *time.Duration, n int, rtt time.Duration, drops, inFlight int) int {
	step := c.cfg.Window / time.Duration(n)
	for i := range n {
		*now += step
		c.Sample(*now, rtt, i < drops, inFlight)
	}
	return c.Limit()
}

// TestGrowsOnlyWhenUsedAndHealthy: a window without queueing grows the
// limit when it was in use; not when the calls in flight were few, nor
// when the latency is above the healthy ceiling.
func TestGrowsOnlyWhenUsedAndHealthy(t *testing.T) {
	for _, tc := range []struct {
		name     string
		ceiling  time.Duration
		inFlight int
		want     int
	}{
		{"used", 0, 20, 28},
		{"idle", 0, 10, 20},
		{"above the ceiling", 50 * time.Millisecond, 20, 20},
		{"below the ceiling", 150 * time.Millisecond, 20, 28},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := New(Config{Ceiling: tc.ceiling}, 0)
			var now time.Duration
			if got := feed(c, &now, 100, 100*time.Millisecond, 0, tc.inFlight); got != tc.want {
				t.Errorf("limit after one window = %d; want %d", got, tc.want)
			}
		})
	}
}

// TestQueueingCutsToTheKnee: at 100 in flight with latency twice the
// baseline, half were queued: the limit goes to the other half plus the
// headroom, in one window.
func TestQueueingCutsToTheKnee(t *testing.T) {
	c := New(Config{Initial: 100}, 0)
	var now time.Duration
	feed(c, &now, 200, 100*time.Millisecond, 0, 50) // the baseline, unused
	if got := feed(c, &now, 200, 200*time.Millisecond, 0, 100); got != 59 {
		t.Errorf("limit = %d; want 59 (50 + 4.5·log10 100)", got)
	}
}

// TestDropsBackOff: 1 % of drops cuts the limit by a tenth, even without
// queueing.
func TestDropsBackOff(t *testing.T) {
	c := New(Config{Initial: 100}, 0)
	var now time.Duration
	if got := feed(c, &now, 100, 100*time.Millisecond, 1, 100); got != 90 {
		t.Errorf("limit = %d; want 90", got)
	}
}

// TestWindowWaitsForSamples: a window whose time is up ends only with
// MinSamples samples.
func TestWindowWaitsForSamples(t *testing.T) {
	c := New(Config{}, 0)
	for i := range MinSamples - 1 {
		if _, ended := c.Sample(time.Duration(i+1)*time.Second, time.Millisecond, false, 20); ended {
			t.Fatalf("window ended after %d samples", i+1)
		}
	}
	if _, ended := c.Sample(20*time.Second, time.Millisecond, false, 20); !ended {
		t.Fatal("window did not end at MinSamples")
	}
}

// TestConfigureKeepsTheLimit: new parameters keep the learned limit,
// clamped to the new bounds, and apply it at once.
func TestConfigureKeepsTheLimit(t *testing.T) {
	c := New(Config{Initial: 60}, 0)
	var applied []int
	c.Configure(Config{Initial: 5, Max: 80}, func(n int) { applied = append(applied, n) })
	c.Configure(Config{Max: 40}, func(n int) { applied = append(applied, n) })
	if len(applied) != 2 || applied[0] != 60 || applied[1] != 40 {
		t.Errorf("applied %v; want [60 40]", applied)
	}
}

// TestNormalize: zero values take the defaults; Initial is clamped.
func TestNormalize(t *testing.T) {
	got := Config{Min: 10, Max: 5, Initial: 2}.Normalize()
	want := Config{Min: 10, Max: 10, Initial: 10, Window: DefaultWindow}
	if got != want {
		t.Errorf("Normalize = %+v; want %+v", got, want)
	}
	if got := (Config{}).Normalize(); got != (Config{Min: 1, Max: 1000, Initial: 20, Window: time.Second}) {
		t.Errorf("Normalize() = %+v", got)
	}
}

// TestMeasureStride: a window of 10 000 calls makes the next measure one
// call in 32 (about 256 samples per window), and every drop.
func TestMeasureStride(t *testing.T) {
	c := New(Config{}, 0)
	for range 10000 {
		if !c.Measure(false) {
			t.Fatal("the first window does not measure every call")
		}
	}
	c.Sample(2*time.Second, time.Millisecond, false, 1)
	c.Sample(2*time.Second, time.Millisecond, false, 1) // nothing ends before MinSamples
	for range MinSamples {
		c.Sample(3*time.Second, time.Millisecond, false, 1)
	}
	measured := 0
	for range 3200 {
		if c.Measure(false) {
			measured++
		}
	}
	if measured != 100 || !c.Measure(true) {
		t.Errorf("measured %d of 3200 calls; want 100, and every drop", measured)
	}
}

// TestDetach: a detached controller hands no limit on.
func TestDetach(t *testing.T) {
	c := New(Config{}, 0)
	applied := 0
	c.Configure(Config{}, func(int) { applied++ })
	c.Detach()
	var now time.Duration
	feed(c, &now, 100, 100*time.Millisecond, 0, 20) // grows the limit
	if applied != 1 || c.Limit() != 28 {
		t.Errorf("applied %d times, limit %d; want once (by Configure), 28", applied, c.Limit())
	}
}
