package adaptive

import (
	"math"
	"slices"
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
// limit when it was in use, the calls in flight averaging 80 % of it or
// more (doubles it: no knee is known yet); not when they were fewer, nor
// when the latency is above the healthy ceiling.
func TestGrowsOnlyWhenUsedAndHealthy(t *testing.T) {
	for _, tc := range []struct {
		name     string
		ceiling  time.Duration
		inFlight int
		want     int
	}{
		{"used", 0, 20, 40},
		{"used at 85 %", 0, 17, 40},
		{"idle", 0, 10, 20},
		{"idle at 75 %", 0, 15, 20},
		{"above the ceiling", 50 * time.Millisecond, 20, 20},
		{"below the ceiling", 150 * time.Millisecond, 20, 40},
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
// baseline, half were queued: the limit goes to the other half, in one
// window. The calls that ended tell it too (n per second at the baseline
// of 100 ms keep n/10 in flight): the limit goes to the lower figure of
// the two.
func TestQueueingCutsToTheKnee(t *testing.T) {
	for _, tc := range []struct {
		name string
		n    int
		rtt  time.Duration
		want int
	}{
		{"by latency", 625, 200 * time.Millisecond, 50},                 // served 62.5 by the calls
		{"by calls served", 500, 100 * time.Millisecond * 100 / 60, 50}, // 60 by latency
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := New(Config{Initial: 100}, 0)
			var now time.Duration
			feed(c, &now, 500, 100*time.Millisecond, 0, 50) // the baseline, unused
			if got := feed(c, &now, tc.n, tc.rtt, 0, 100); got != tc.want {
				t.Errorf("limit = %d; want %d", got, tc.want)
			}
		})
	}
}

// TestFindsAndHoldsTheKnee: in front of work that serves 50 calls at
// once in 100 ms and queues the others, the limit doubles from 20 until a
// window shows a queue (80), cuts to the knee (50) and holds there: the
// window after the cut does not cut again although the calls it drains
// were queued, and for probeAfter windows it holds. Then it probes one
// call past the knee, and a probe that finds a queue is undone.
func TestFindsAndHoldsTheKnee(t *testing.T) {
	c := New(Config{}, 0)
	var now time.Duration
	// window feeds one window of the work at the limit: up to the knee
	// every call takes 100 ms; past it, calls queue and the work serves
	// 500 per second.
	window := func(rtt time.Duration) int {
		limit := c.Limit()
		x := min(limit*10, 500)
		if rtt == 0 {
			rtt = 100 * time.Millisecond * time.Duration(max(limit, 50)) / 50
		}
		return feed(c, &now, x, rtt, 0, limit)
	}
	var got []int
	for range 3 {
		got = append(got, window(0))
	}
	got = append(got, window(150*time.Millisecond)) // the queue the cut drains
	if want := []int{40, 80, 50, 50}; !slices.Equal(got, want) {
		t.Fatalf("limits %v; want %v", got, want)
	}
	for i := range probeAfter - 1 {
		if got := window(0); got != 50 {
			t.Fatalf("after %d windows at the knee the limit is %d; want 50", i+1, got)
		}
	}
	if got := window(0); got != 51 {
		t.Fatalf("after %d windows at the knee the limit is %d; want a probe to 51", probeAfter, got)
	}
	if got := window(103 * time.Millisecond); got != 50 {
		t.Fatalf("after a probe that found 1.5 calls queued the limit is %d; want 50", got)
	}
}

// TestFractionalKneeIsProbed: a cut to a knee that is no whole number of
// calls (45.3 here) holds at the rounded knee and still probes one call
// past it after probeAfter quiet windows; an unrounded knee kept the
// limit below it for good, never probing.
func TestFractionalKneeIsProbed(t *testing.T) {
	c := New(Config{}, 0)
	var now time.Duration
	const knee = 45.3
	window := func() int { // 500 samples a window; past the knee, calls queue
		limit := c.Limit()
		rtt := time.Duration(float64(100*time.Millisecond) * max(float64(limit), knee) / knee)
		return feed(c, &now, 500, rtt, 0, limit)
	}
	var got []int
	for range 3 {
		got = append(got, window())
	}
	if want := []int{40, 80, 45}; !slices.Equal(got, want) {
		t.Fatalf("limits %v; want %v", got, want)
	}
	window() // the window after the cut, which drains its queue
	for i := range probeAfter - 1 {
		if got := window(); got != 45 {
			t.Fatalf("after %d windows at the knee the limit is %d; want 45", i+1, got)
		}
	}
	if got := window(); got != 46 {
		t.Fatalf("after %d windows at the knee the limit is %d; want a probe to 46", probeAfter, got)
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
	if applied != 1 || c.Limit() != 40 {
		t.Errorf("applied %d times, limit %d; want once (by Configure), 40", applied, c.Limit())
	}
}

// atKnee returns a controller that found a knee of 40 calls at a baseline
// of 100 ms: a window at 80 in flight took 200 ms (a queue of 40), which
// cut the limit to 40, and the window after, at 40, drained it.
func atKnee(t *testing.T, now *time.Duration, ceiling time.Duration) *Controller {
	t.Helper()
	c := New(Config{Initial: 80, Ceiling: ceiling}, 0)
	feed(c, now, 250, 100*time.Millisecond, 0, 25) // the baseline, unused
	got := []int{feed(c, now, 400, 200*time.Millisecond, 0, 80), feed(c, now, 400, 100*time.Millisecond, 0, 40)}
	if want := []int{40, 40}; !slices.Equal(got, want) {
		t.Fatalf("limits %v; want %v", got, want)
	}
	return c
}

// refuse tells c that the limit turned n calls away.
func refuse(c *Controller, n int) {
	for range n {
		c.Refuse()
	}
}

// TestRoomForBursts: at a knee of 40, random arrivals that offer the knee
// find it full 12 % of the time (Erlang's loss formula), so the limit
// keeps room above it: 31 calls, which turn away at most 2.5 %. The room
// shrinks as the offered load (calls that ended and calls turned away)
// grows past 1.1 times the knee, and is none from 1.5 times it: there
// the room would buy no goodput, only waiting. When the calls filled the
// limit and none was turned away, the load is unknown: no room. Above the
// healthy-latency ceiling, there is none either.
func TestRoomForBursts(t *testing.T) {
	for _, tc := range []struct {
		name              string
		ceiling           time.Duration
		refused, inFlight int
		want              int
	}{
		{"offered the knee", 0, 80, 36, 71},      // 320 + 80 per second, at 100 ms: 40
		{"offered 1.1 times it", 0, 120, 36, 71}, // 44
		{"offered 1.3 times it", 0, 200, 36, 56}, // 52: half the room
		{"offered twice it", 0, 480, 36, 40},
		{"not full, none turned away", 0, 0, 30, 71}, // 32: the calls that ended are the load
		{"full, none turned away", 0, 0, 36, 40},
		{"above the ceiling", 50 * time.Millisecond, 80, 36, 40},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var now time.Duration
			c := atKnee(t, &now, tc.ceiling)
			refuse(c, tc.refused)
			if got := feed(c, &now, 320, 100*time.Millisecond, 0, tc.inFlight); got != tc.want {
				t.Errorf("limit = %d; want %d", got, tc.want)
			}
		})
	}
}

// TestRoomIsNoKnee: the queue the room lets bursts make is no sign of a
// knee: the limit keeps it, and does not probe past the knee while it has
// room (the load fits under it). A queue beyond the room, a full limit
// that still queues, is: the limit is cut, and the room goes, although
// the load offered looks like the knee at the baseline (work that became
// slower makes the baseline stale).
func TestRoomIsNoKnee(t *testing.T) {
	var now time.Duration
	c := atKnee(t, &now, 0)
	refuse(c, 80)
	if got := feed(c, &now, 320, 100*time.Millisecond, 0, 36); got != 71 {
		t.Fatalf("limit = %d; want 71", got)
	}
	for i := range 2 * probeAfter {
		// 60 in flight at 150 ms: 40 served, 20 queued, within the room.
		refuse(c, 8)
		if got := feed(c, &now, 400, 150*time.Millisecond, 0, 60); got != 71 {
			t.Fatalf("window %d with a queue within the room: limit = %d; want 71", i+1, got)
		}
	}
	// 71 in flight at 400 ms: 18 served, 53 queued; 160 + 240 calls
	// offered per second, at 100 ms: 40.
	refuse(c, 240)
	if got := feed(c, &now, 160, 400*time.Millisecond, 0, 71); got != 36 {
		t.Fatalf("after a queue beyond the room the limit is %d; want 36 (half the calls in flight)", got)
	}
}

// TestDropsTakeTheRoom: a window with 1 % of drops takes the room away and
// backs the limit off by a tenth.
func TestDropsTakeTheRoom(t *testing.T) {
	var now time.Duration
	c := atKnee(t, &now, 0)
	refuse(c, 80)
	feed(c, &now, 320, 100*time.Millisecond, 0, 36)
	refuse(c, 40)
	if got := feed(c, &now, 400, 100*time.Millisecond, 4, 40); got != 36 {
		t.Errorf("limit = %d; want 36", got)
	}
}

// TestHeadroom: the room at a knee k offered k is 1/0.025 − 1/B(k), at
// most k: B(1) = 1/2, B(40) ≈ 0.116; at 1100, B is under 2.5 %: no room.
func TestHeadroom(t *testing.T) {
	for _, tc := range []struct {
		knee, want float64
	}{{1, 1}, {5, 5}, {40, 31.39}, {100, 26.79}, {1100, 0}} {
		c := &Controller{knee: tc.knee}
		if got := c.headroom(tc.knee); math.Abs(got-tc.want) > 0.01 {
			t.Errorf("headroom at a knee of %v = %.2f; want %.2f", tc.knee, got, tc.want)
		}
	}
}
