package outcome_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sundial-go/sundial/adapters/internal/outcome"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
)

// TestUnexpectedShowsNothing: an UNEXPECTED outcome shows a caller only the
// generic message and no details, whatever made it UNEXPECTED: a kind
// outside the table (or KindOK), a nil or zero Error, a foreign error.
func TestUnexpectedShowsNothing(t *testing.T) {
	hidden := map[string]*pipeline.Error{
		"nil":     nil,
		"zero":    new(pipeline.Error),
		"literal": {},
		"foreign": pipeline.AsError(errors.New("pq: connection refused to 10.0.0.5")),
		"unexpected": pipeline.NewError(pipeline.KindUnexpected, "X_001", "secret").
			WithDetail("host", "10.0.0.5").WithRetryAfter(time.Minute),
	}
	for _, k := range []pipeline.Kind{pipeline.KindOK, pipeline.Kind(42), pipeline.Kind(255)} {
		hidden[fmt.Sprintf("kind %d NewError", k)] = pipeline.NewError(k, "X_001", "secret text").WithDetail("host", "10.0.0.5")
		hidden[fmt.Sprintf("kind %d NewError+Sprintf", k)] = pipeline.NewError(k, "X_001", fmt.Sprintf("secret %s", "text")).WithDetail("host", "10.0.0.5")
		hidden[fmt.Sprintf("kind %d Wrap", k)] = pipeline.Wrap(k, "X_001", "secret text", errors.New("c")).WithDetail("host", "10.0.0.5")
	}
	for name, e := range hidden {
		if got := outcome.SafeMessage(e); got != pipeline.UnexpectedMessage {
			t.Errorf("%s: SafeMessage = %q, want %q", name, got, pipeline.UnexpectedMessage)
		}
		if got := outcome.SafeDetails(e); got != nil {
			t.Errorf("%s: SafeDetails = %v, want nil", name, got)
		}
		if got := outcome.Details(e); got != nil {
			t.Errorf("%s: Details = %v, want nil", name, got)
		}
	}
}

// TestKnownKindShows: an outcome of a known kind shows its message and
// details, and Details adds the retry-after in whole seconds. Each call
// returns a copy: changing it leaves the outcome alone.
func TestKnownKindShows(t *testing.T) {
	e := pipeline.NewError(pipeline.KindConflict, "C", "visible").WithDetail("id", 1)
	if got := outcome.SafeMessage(e); got != "visible" {
		t.Errorf("SafeMessage = %q, want visible", got)
	}
	sd := outcome.SafeDetails(e)
	if len(sd) != 1 || sd["id"] != 1 {
		t.Errorf("SafeDetails = %v, want map[id:1]", sd)
	}
	sd["id"] = "changed"
	if got := outcome.Details(e); len(got) != 1 || got["id"] != 1 {
		t.Errorf("Details after changing a copy = %v, want map[id:1]", got)
	}
	if got := outcome.Details(pipeline.NewError(pipeline.KindConflict, "C", "m")); got != nil {
		t.Errorf("Details without details or retry-after = %v, want nil", got)
	}
	retry := e.WithRetryAfter(1500 * time.Millisecond)
	if got := outcome.Details(retry); len(got) != 2 || got[pipelinetest.DetailRetryAfter] != int64(2) {
		t.Errorf("Details with a retry-after of 1.5 s = %v, want id and retryAfter 2", got)
	}
	if v := retry.Details()[pipelinetest.DetailRetryAfter]; v != nil {
		t.Errorf("Details wrote the retry-after into the outcome: %v", v)
	}
}

// TestTable: For gives each kind its value and anything else the fallback;
// KindOf inverts the table, the first kind winning a shared value, and
// knows the aliases.
func TestTable(t *testing.T) {
	tab := outcome.NewTable(-1, map[pipeline.Kind]int{
		pipeline.KindOK:              0,
		pipeline.KindUnauthenticated: 4,
		pipeline.KindForbidden:       4,
		pipeline.KindTimeout:         7,
	}, map[int]pipeline.Kind{9: pipeline.KindTimeout})
	for k, want := range map[pipeline.Kind]int{
		pipeline.KindOK: 0, pipeline.KindForbidden: 4, pipeline.KindTimeout: 7,
		pipeline.KindNotFound: -1, pipeline.KindUnexpected: -1, pipeline.Kind(42): -1, pipeline.Kind(255): -1,
	} {
		if got := tab.For(k); got != want {
			t.Errorf("For(%d) = %d, want %d", k, got, want)
		}
	}
	for v, want := range map[int]pipeline.Kind{0: pipeline.KindOK, 4: pipeline.KindUnauthenticated, 7: pipeline.KindTimeout, 9: pipeline.KindTimeout} {
		if got, ok := tab.KindOf(v); !ok || got != want {
			t.Errorf("KindOf(%d) = %v, %v; want %v", v, got, ok, want)
		}
	}
	for _, v := range []int{-1, 3, 8} {
		if got, ok := tab.KindOf(v); ok {
			t.Errorf("KindOf(%d) = %v, want none", v, got)
		}
	}
}

// TestParseKind: every kind's name parses back to it, and no other does.
func TestParseKind(t *testing.T) {
	for k := pipeline.KindOK; k <= pipeline.KindUnexpected; k++ {
		if got, ok := outcome.ParseKind(k.String()); !ok || got != k {
			t.Errorf("ParseKind(%q) = %v, %v", k.String(), got, ok)
		}
	}
	for _, s := range []string{"", "CANCELED", "ok", "Kind(42)"} {
		if got, ok := outcome.ParseKind(s); ok || got != pipeline.KindUnexpected {
			t.Errorf("ParseKind(%q) = %v, %v; want UNEXPECTED, false", s, got, ok)
		}
	}
}
