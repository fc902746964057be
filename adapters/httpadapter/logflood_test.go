package httpadapter_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sundial-go/sundial/adapters/httpadapter"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/kernel/logs/logstest"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
)

// TestBaggageFloodIsSampled: a flood of requests whose baggage the adapter
// drops (over its limit) or the kernel cuts (over 32 members) writes a
// handful of records on the default logger; summaries count the others.
func TestBaggageFloodIsSampled(t *testing.T) {
	var logs pipelinetest.LogSink
	logs.CaptureDefault(t) // no t.Parallel: the default logger is global
	app := newTestApp()
	k, err := kernel.New(kernel.WithRegistry(app.register(t)), kernel.WithConfigJSON([]byte(testConfig)))
	if err != nil {
		t.Fatal(err)
	}
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	if _, err := httpadapter.Mount(e, k, httpadapter.WithBaggageLimit(1024)); err != nil {
		t.Fatal(err)
	}
	s := serveEcho(t, e)
	members := make([]string, 40)
	for i := range members {
		members[i] = fmt.Sprintf("m%02d=v", i)
	}
	bags := []string{"tenant=" + strings.Repeat("x", 2000), strings.Join(members, ",")}
	const n = 200
	start := time.Now()
	for i := range n {
		if r := s.do(t, "POST", "/baggage", "", map[string]string{"Baggage": bags[i%2]}); r.status != 200 {
			t.Fatalf("request %d = %d %s, want 200", i, r.status, r.body)
		}
	}
	elapsed := time.Since(start)
	logstest.CheckSampled(t, &logs, "httpadapter: baggage header dropped", n/2, elapsed)
	logstest.CheckSampled(t, &logs, "sundial: baggage over the limit; members dropped", n/2, elapsed)
}
