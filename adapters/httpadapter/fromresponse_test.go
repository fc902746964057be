package httpadapter_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sundial-go/sundial/adapters/httpadapter"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience"
)

// call sends method path body to s and converts the answer with
// FromResponse.
func call(t *testing.T, s *server, method, path, body string, header map[string]string) error {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, s.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return httpadapter.FromResponse(resp)
}

// TestFromResponseRateLimited: a real downstream's 503
// KERNEL_UNAVAILABLE_002 (its fixed window of 3 a minute is spent) reaches
// the caller as what it is: UNAVAILABLE, its code, its message, its
// retry-after.
func TestFromResponseRateLimited(t *testing.T) {
	s := startServer(t, newTestApp(), serverOpts{})
	for range 3 {
		if err := call(t, s, "POST", "/items", `{"name":"bolt","qty":1}`, nil); err != nil {
			t.Fatal(err)
		}
	}
	err := call(t, s, "POST", "/items", `{"name":"bolt","qty":1}`, nil)
	e, ok := errors.AsType[*pipeline.Error](err)
	if !ok || e.Kind() != pipeline.KindUnavailable || e.Code() != resilience.CodeRateLimited {
		t.Fatalf("err = %v, want UNAVAILABLE %s", err, resilience.CodeRateLimited)
	}
	ra, has := e.RetryAfter()
	if !has || ra <= 0 || ra > time.Minute {
		t.Fatalf("retry-after %v %v, want the window's remainder", ra, has)
	}
	if st, _ := e.Details()[httpadapter.DetailDownstreamStatus]; st != 503 {
		t.Fatalf("downstreamStatus = %v", st)
	}
}

// TestFromResponseDownstreamTimeoutIsNotOurs: a downstream that ran out
// of the 50 ms it was told it had answers 504 KERNEL_TIMEOUT_001; the
// caller's own context has no deadline and is live, and the outcome is a
// TIMEOUT that errors.Is does not take for context.DeadlineExceeded.
func TestFromResponseDownstreamTimeoutIsNotOurs(t *testing.T) {
	s := startServer(t, newTestApp(), serverOpts{})
	err := call(t, s, "POST", "/work", `{"delayMs":5000}`, map[string]string{"Sundial-Timeout-Ms": "50"})
	e := pipeline.AsError(err)
	if e.Kind() != pipeline.KindTimeout || e.Code() != pipeline.CodeTimeout {
		t.Fatalf("err = %v, want TIMEOUT %s", err, pipeline.CodeTimeout)
	}
	if errors.Is(err, context.DeadlineExceeded) || t.Context().Err() != nil {
		t.Fatalf("a downstream 504 reads as our own deadline: %v", err)
	}
	if st, _ := e.Details()[httpadapter.DetailDownstreamStatus]; st != 504 {
		t.Fatalf("downstreamStatus = %v", st)
	}
}

// TestFromResponseDetails: a NOT_FOUND keeps its code and details; an
// answer that is not a Problem gets its status's kind and HTTP_<status>;
// success is nil.
func TestFromResponseDetails(t *testing.T) {
	s := startServer(t, newTestApp(), serverOpts{})
	e := pipeline.AsError(call(t, s, "GET", "/items/404", "", nil))
	if id, _ := e.Details()["id"]; e.Kind() != pipeline.KindNotFound || e.Code() != "TEST_NOT_FOUND_001" || fmt.Sprint(id) != "404" ||
		e.Message() != "no such item" {
		t.Fatalf("err = %v (id %v)", e, id)
	}
	if err := call(t, s, "GET", "/items/7", "", nil); err != nil {
		t.Fatalf("success: %v", err)
	}
	for _, tc := range []struct {
		status int
		kind   pipeline.Kind
		code   string
	}{{502, pipeline.KindUnexpected, "HTTP_502"}, {429, pipeline.KindUnavailable, "HTTP_429"}, {418, pipeline.KindValidation, "HTTP_418"}} {
		resp := &http.Response{StatusCode: tc.status, Header: http.Header{"Retry-After": {"7"}}, Body: http.NoBody}
		e := pipeline.AsError(httpadapter.FromResponse(resp))
		ra, _ := e.RetryAfter()
		if e.Kind() != tc.kind || e.Code() != tc.code || ra != 7*time.Second {
			t.Fatalf("%d: %v (retry-after %v)", tc.status, e, ra)
		}
	}
}
