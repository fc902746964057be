package outbound

import (
	"context"
	"testing"
	"testing/synctest"

	"go.opentelemetry.io/otel/baggage"

	"github.com/sundial-go/sundial/pipeline/pipelinetest"
)

// TestDoRetryMark: a policy that may retry marks every attempt with the
// baggage member sundial.retried; a policy of one attempt marks none. A
// call whose context carries the mark (a tier above retries it) makes one
// attempt, however retryable its answer, and passes the mark on.
func TestDoRetryMark(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mark := func(ctx context.Context) string { return baggage.FromContext(ctx).Member(baggageRetried).Value() }
		for _, tc := range []struct {
			attempts      int
			marked        bool // the caller's context carries the mark
			wantAttempts  int
			wantAttemptMk string
		}{
			{3, false, 3, "1"},
			{1, false, 1, ""},
			{3, true, 1, "1"},
		} {
			p := DefaultPolicy()
			p.Attempts = tc.attempts
			d := dep(t, p)
			ctx := t.Context()
			if tc.marked {
				ctx = withMember(ctx, baggageRetried, "1")
			}
			var marks []string
			err := d.Do(ctx, func(actx context.Context) error {
				marks = append(marks, mark(actx))
				return unavailable()
			})
			if pipelinetest.CodeOf(err) != "BILLING_UNAVAILABLE_001" || len(marks) != tc.wantAttempts {
				t.Fatalf("%+v: err %v after %d attempts, want the answer after %d", tc, err, len(marks), tc.wantAttempts)
			}
			for i, m := range marks {
				if m != tc.wantAttemptMk {
					t.Errorf("%+v: attempt %d carries mark %q, want %q", tc, i+1, m, tc.wantAttemptMk)
				}
			}
		}
	})
}
