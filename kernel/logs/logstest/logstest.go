// Package logstest holds the bounds of a logs.Sampler for tests, and a
// check of a sampled flood. The sampler's own tests check that it keeps
// those bounds.
package logstest

import (
	"testing"
	"time"

	"github.com/sundial-go/sundial/pipeline/pipelinetest"
)

// The bounds of every logs.Sampler (docs/observability.md).
const (
	// SampleBurst events at once get a record each.
	// Then SampleRate a second do, on average.
	SampleBurst = 10
	SampleRate  = 1.0
	// SampleSummaryAfter is how long after the first event without a
	// record of its own the summary comes.
	SampleSummaryAfter = 10 * time.Second
)

// CheckSampled fails t unless, of want events logged as msg over
// elapsed, at most the sampler's burst and rate got a record each, at
// least one did, and the summaries in logs count the others.
func CheckSampled(t testing.TB, logs *pipelinetest.LogSink, msg string, want int64, elapsed time.Duration) {
	t.Helper()
	limit := int64(SampleBurst + SampleRate*elapsed.Seconds() + 1)
	own, suppressed := logs.WaitSampled(SampleSummaryAfter+elapsed+30*time.Second, msg, want)
	if own > limit || own == 0 || own+suppressed != want {
		t.Fatalf("%q: %d records of their own (at most %d in %v) and %d counted in summaries, want %d in all",
			msg, own, limit, elapsed, suppressed, want)
	}
	t.Logf("%q: %d records of their own, %d counted in summaries", msg, own, suppressed)
}
