// Package logstest holds the bounds of a logs.Sampler for tests. The
// sampler's own tests check that it keeps them.
package logstest

import "time"

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
