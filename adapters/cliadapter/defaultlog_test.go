package cliadapter

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
)

// TestUnexpectedCauseIsLogged: with no logger set, the cause of an
// UNEXPECTED outcome, which the Problem Details on stderr leave out,
// reaches slog's default logger at Error, with the operation and code.
func TestUnexpectedCauseIsLogged(t *testing.T) {
	var logs pipelinetest.LogSink
	logs.CaptureDefault(t)
	r := execute(t, testKernel(t), nil, "", "test", "fail", "--kind", "PLAIN")
	if r.code != exitUnexpected || strings.Contains(r.stderr, "secret") {
		t.Fatalf("fail --kind PLAIN = exit %d, stderr %q; want %d without the cause", r.code, r.stderr, exitUnexpected)
	}
	recs := logs.Find(pipelinetest.Message("cli command"))
	if len(recs) != 1 {
		t.Fatalf("default log = %v, want one cli command record", logs.Records())
	}
	rec := recs[0]
	msg, _ := rec.Attrs["error"].(string)
	if rec.Level != slog.LevelError || !strings.Contains(msg, "secret database password") ||
		rec.Attrs["operation"] != "test.fail" || rec.Attrs["code"] != pipeline.CodeUnexpected {
		t.Errorf("record = %+v, want Error with the cause, operation test.fail and code %s", rec, pipeline.CodeUnexpected)
	}
}
