package resilience_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience"
)

// nilPipelineError is the classic typed nil: a nil *pipeline.Error returned
// as a non-nil error.
func nilPipelineError(context.Context, *pipeline.Invocation) (any, error) {
	var e *pipeline.Error
	return nil, e
}

// TestTypedNilErrorProbeDoesNotWedgeTheBreaker: a half-open probe whose
// handler returns a nil *pipeline.Error as its error is a failure that
// re-opens the breaker; it must not leave the probe's slot taken, which
// would reject every later call for good.
func TestTypedNilErrorProbeDoesNotWedgeTheBreaker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, l := breakerStack(t, resilience.Policy{FailureThreshold: 1, BreakDuration: 10 * time.Second})
		expectCode(t, "failure", invokeLimited(t.Context(), h, errors.New("db down")), pipeline.CodeUnexpected)
		time.Sleep(10 * time.Second)
		expectCode(t, "probe returning a typed nil", invokeLimited(t.Context(), h, nilPipelineError), pipeline.CodeUnexpected)
		expectBreaker(t, "after the typed-nil probe", l, resilience.BreakerOpen)
		time.Sleep(10 * time.Second)
		expectCode(t, "next probe", invokeLimited(t.Context(), h, nil), "")
		expectBreaker(t, "after the next probe", l, resilience.BreakerClosed)
	})
}
