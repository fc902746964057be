package app_test

import (
	"context"
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/samples/shop/app"
)

// A delayMs near 2^63 used to overflow time.Duration(delayMs) *
// time.Millisecond to a negative duration: reports.export answered at once,
// with rows. It is a VALIDATION error naming the bound now, and a direct
// call with such a delay waits (clamped to MaxDelayMs) instead of answering.
func TestExportReportDelayBound(t *testing.T) {
	reg := operations.NewRegistry()
	if err := app.New().Register(reg); err != nil {
		t.Fatal(err)
	}
	k, err := kernel.New(kernel.WithRegistry(reg), kernel.WithConfigJSON(app.DefaultConfig))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []int{app.MaxDelayMs + 1, math.MaxInt64 / int(time.Millisecond), 1 << 62, math.MaxInt64} {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		start := time.Now()
		out, err := kernel.Call[app.ExportReport, app.Report](ctx, k, "reports.export", app.ExportReport{DelayMs: d})
		took := time.Since(start)
		cancel()
		t.Logf("delayMs %d: %+v, %v after %v", d, out, err, took.Round(time.Microsecond))
		e := pipeline.AsError(err)
		if err == nil || e.Kind() != pipeline.KindValidation || e.Code() != operations.CodeConstraint {
			t.Errorf("delayMs %d: got %+v, %v; want VALIDATION %s", d, out, err, operations.CodeConstraint)
			continue
		}
		if !strings.Contains(e.Error(), "at most 3600000") {
			t.Errorf("delayMs %d: message %q does not name the bound", d, e.Error())
		}
		vs, _ := e.Details()[operations.DetailViolations].([]operations.Violation)
		if len(vs) != 1 || vs[0].Field != "delayMs" || vs[0].Rule != "max" || vs[0].Param != strconv.Itoa(app.MaxDelayMs) {
			t.Errorf("delayMs %d: violations %+v, want delayMs max %d", d, vs, app.MaxDelayMs)
		}
	}
	desc, _ := reg.Lookup("reports.export")
	for _, d := range []int{0, app.MaxDelayMs} {
		if err := desc.CheckConstraints(&app.ExportReport{DelayMs: d}); err != nil {
			t.Errorf("delayMs %d: CheckConstraints = %v, want nil", d, err)
		}
	}

	// A direct call, past validation: clamped, so it works until its
	// context ends instead of answering at once.
	start := time.Now() // before the context: its deadline is at most start+50ms
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	out, err := app.New().ExportReport(ctx, app.ExportReport{DelayMs: math.MaxInt64})
	if took := time.Since(start); !errors.Is(err, context.DeadlineExceeded) || took < 50*time.Millisecond {
		t.Errorf("direct call with delayMs 2^63-1: %+v, %v after %v; want the context's error after 50ms", out, err, took)
	}
}
