package main

import (
	"strings"
	"testing"
	"time"
)

// TestEveryContenderServes runs each contender briefly, below the
// backend's capacity, in real time: each must build, admit calls and have
// them served, and the run writes its trace. It checks the wiring, not the figures (those depend on the
// host; docs/performance.md has a run's).
func TestEveryContenderServes(t *testing.T) {
	p := params{c: 8, s: 20 * time.Millisecond, deadline: time.Second, scale: 1, seed: 1}
	sc := scenario{name: "half", load: 0.5, duration: 300 * time.Millisecond,
		phases: []phase{{name: "all", to: 2 * time.Second, capacity: p.capacity(), headline: true}}}
	for _, c := range contenders(4) {
		t.Run(c.name, func(t *testing.T) {
			res, err := run(p, sc, c)
			if err != nil {
				t.Fatalf("run: %v", err)
			}
			ph := res.phases[0]
			if ph.offered == 0 || ph.admitted == 0 || ph.goodput == 0 {
				t.Errorf("offered %v/s, admitted %v, goodput %v/s: want calls admitted and served",
					ph.offered, ph.admitted, ph.goodput)
			}
			lines := strings.Split(strings.TrimSpace(res.trace), "\n")
			if len(lines) == 0 || len(strings.Fields(lines[0])) != 4 {
				t.Errorf("trace %q: want lines of time, limit, calls in the backend, calls turned away", res.trace)
			}
		})
	}
}
