package pipeline_test

import (
	"testing"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
)

// TestCodeWireValues pins the wire value of every code the pipeline owns:
// callers match on these strings, so they never change.
func TestCodeWireValues(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{pipeline.CodeTimeout, "KERNEL_TIMEOUT_001"},
		{pipeline.CodeCanceled, "KERNEL_CANCELLED_001"},
		{pipeline.CodeUnexpected, "KERNEL_UNEXPECTED_001"},
		{pipeline.CodeValidation, "KERNEL_VALIDATION_001"},
		{pipelinetest.DetailRetryAfter, "retryAfter"},
		{pipeline.UnexpectedMessage, "An unexpected error occurred."},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}
