package httpadapter_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sundial-go/sundial/adapters/httpadapter"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
)

// TestUnexpectedCauseIsLoggedByDefault: a service that sets no logger, on
// the kernel or the adapter, answers a handler's plain error with a bare
// 500 and writes the error itself to slog's default logger at Error.
func TestUnexpectedCauseIsLoggedByDefault(t *testing.T) {
	var logs pipelinetest.LogSink
	logs.CaptureDefault(t)
	const cause = "disk 7 unreadable"
	reg := operations.NewRegistry()
	err := operations.Register(reg, operations.Descriptor{ID: "notes.add", Method: "POST", Path: "/notes"},
		func(context.Context, struct{}) (struct{}, error) { return struct{}{}, errors.New(cause) })
	if err != nil {
		t.Fatal(err)
	}
	k, err := kernel.New(kernel.WithRegistry(reg))
	if err != nil {
		t.Fatal(err)
	}
	e := echo.New()
	if _, err := httpadapter.Mount(e, k); err != nil {
		t.Fatal(err)
	}
	r := serveEcho(t, e).do(t, http.MethodPost, "/notes", "{}", nil)
	if r.status != http.StatusInternalServerError || strings.Contains(string(r.body), cause) {
		t.Fatalf("POST /notes = %d %s, want 500 without the cause", r.status, r.body)
	}
	rec, ok := logs.WaitFor(5*time.Second, pipelinetest.Message("http request"))
	msg, _ := rec.Attrs["error"].(string)
	if !ok || rec.Level != slog.LevelError || !strings.Contains(msg, cause) || rec.Attrs["traceId"] != r.problem["traceId"] {
		t.Errorf("default log = %v, want an Error record with %q and the problem's traceId", logs.Records(), cause)
	}
}
