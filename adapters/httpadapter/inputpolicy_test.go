package httpadapter_test

import (
	"net/http"
	"testing"

	"github.com/sundial-go/sundial/operations"
)

// TestInputPolicyOverHTTP: the JSON body goes through the operation's
// input policy (operations.InputPolicy): an unknown field, nested too, or
// a key in the wrong case is 400 KERNEL_VALIDATION_003 with details.field
// naming it, and the handler does not run: the body
// {"name":"a","extra":true} is not 200, nor does "Name" set name.
func TestInputPolicyOverHTTP(t *testing.T) {
	app := newTestApp()
	s := startServer(t, app, serverOpts{})
	for _, tc := range []struct{ body, field string }{
		{`{"name":"a","extra":true}`, "extra"},
		{`{"Name":"a"}`, "Name"},
		{`{"name":"a","tags":[{"label":"x"},{"lable":"y"}]}`, "tags[1].lable"},
	} {
		r := s.do(t, http.MethodPost, "/items", tc.body, nil)
		checkProblem(t, r, http.StatusBadRequest, "VALIDATION", operations.CodeUnknownField, "/items")
		if got := details(r)["field"]; got != tc.field {
			t.Errorf("POST /items %s: details.field = %v, want %q", tc.body, got, tc.field)
		}
	}
	if n := app.calls.Load(); n != 0 {
		t.Errorf("the handler ran %d times, want 0", n)
	}
	if r := s.do(t, http.MethodPost, "/items", `{"name":"a","qty":2}`, nil); r.status != http.StatusCreated {
		t.Errorf("POST /items with known fields = %d %s, want 201", r.status, r.body)
	}
}
