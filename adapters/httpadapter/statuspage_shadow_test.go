package httpadapter_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sundial-go/sundial/adapters/httpadapter"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
)

// TestStatusPageShowsShadow: an operation in shadow mode shows the mode
// with its policy and what its limits would have turned away.
func TestStatusPageShowsShadow(t *testing.T) {
	reg := operations.NewRegistry()
	if err := operations.Register(reg, operations.Descriptor{ID: "jobs.start", Method: "POST", Path: "/jobs"},
		func(context.Context, struct{}) (struct{}, error) { return struct{}{}, nil }); err != nil {
		t.Fatal(err)
	}
	k, err := kernel.New(kernel.WithRegistry(reg), kernel.WithConfigJSON([]byte(`{"Sundial":{"Kernel":{"Resilience":{
		"Operations":{"jobs.start":{"PermitLimit":1,"WindowSeconds":3600,"Shadow":true}}}}}}`)))
	if err != nil {
		t.Fatal(err)
	}
	e := echo.New()
	if _, err := httpadapter.Mount(e, k); err != nil {
		t.Fatal(err)
	}
	e.GET("/debug/sundial", httpadapter.StatusPage(k, time.Second))
	s := serveEcho(t, e)
	for range 3 {
		if r := s.do(t, "POST", "/jobs", "", nil); r.status != 204 {
			t.Fatalf("POST /jobs = %d %s, want 204 (shadow mode rejects nothing)", r.status, r.body)
		}
	}
	page := string(s.do(t, "GET", "/debug/sundial", "", nil).body)
	for _, want := range []string{"shadow mode", "shadow, would have: rate 2, concurrency 0, breaker 0"} {
		if !strings.Contains(page, want) {
			t.Errorf("the status page lacks %q:\n%s", want, page)
		}
	}
}
