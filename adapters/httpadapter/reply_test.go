package httpadapter_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/sundial-go/sundial/adapters/httpadapter"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience/idempotency"
)

type replyIn struct {
	Fail bool `json:"fail"`
}

// replyServer serves reply.run (POST /reply: NOT_FOUND when the input
// says fail; keyed) with mw as application middleware in the diagnostics
// stage, and returns a poster: POST /reply with body and, unless "", the
// idempotency key.
func replyServer(t *testing.T, mw pipeline.Middleware) func(body, key string) *http.Response {
	t.Helper()
	reg := operations.NewRegistry()
	if err := operations.Register(reg, operations.Descriptor{ID: "reply.run", Method: "POST", Path: "/reply"},
		func(ctx context.Context, in replyIn) (struct{}, error) {
			if in.Fail {
				return struct{}{}, pipeline.NewError(pipeline.KindNotFound, "TEST_NOT_FOUND", "No such thing.")
			}
			return struct{}{}, nil
		}); err != nil {
		t.Fatal(err)
	}
	k, err := kernel.New(kernel.WithRegistry(reg),
		kernel.WithConfigJSON([]byte(`{"Sundial":{"Kernel":{"Resilience":{"Operations":{"reply.run":{"Idempotency":{}}}}}}}`)),
		kernel.UseAt(pipeline.StageDiagnostics, mw))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { k.Close() })
	e := echo.New()
	if _, err := httpadapter.Mount(e, k); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return func(body, key string) *http.Response {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), "POST", srv.URL+"/reply", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set("Idempotency-Key", `"`+key+`"`)
		}
		res, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res
	}
}

// TestReplyFieldsAreResponseHeaders: a field a middleware sets on the
// invocation's Reply is a response header, once, on success and on
// failure alike.
func TestReplyFieldsAreResponseHeaders(t *testing.T) {
	post := replyServer(t, pipeline.MiddlewareFunc(func(ctx context.Context, inv *pipeline.Invocation, next pipeline.Handler) (any, error) {
		inv.Reply().Set("X-Served-By", "replica-a")
		return next(ctx, inv)
	}))
	for _, tc := range []struct {
		body   string
		status int
	}{{`{}`, http.StatusNoContent}, {`{"fail":true}`, http.StatusNotFound}} {
		res := post(tc.body, "")
		if res.StatusCode != tc.status {
			t.Fatalf("%s: status %d, want %d", tc.body, res.StatusCode, tc.status)
		}
		if got := res.Header.Values("X-Served-By"); !slices.Equal(got, []string{"replica-a"}) {
			t.Errorf("%s: X-Served-By %q, want [replica-a]", tc.body, got)
		}
	}
}

// TestReplyReplayMarkSentOnce: a replayed outcome whose Reply carries the
// replay mark (as the idempotency middleware sets it) is marked once,
// and a first call is not marked.
func TestReplyReplayMarkSentOnce(t *testing.T) {
	post := replyServer(t, pipeline.MiddlewareFunc(func(ctx context.Context, inv *pipeline.Invocation, next pipeline.Handler) (any, error) {
		out, err := next(ctx, inv)
		return out, err
	}))
	if got := post(`{}`, "k1").Header.Values(idempotency.FieldReplayed); len(got) != 0 {
		t.Fatalf("first call: Idempotent-Replayed %q, want none", got)
	}
	if got := post(`{}`, "k1").Header.Values(idempotency.FieldReplayed); !slices.Equal(got, []string{"true"}) {
		t.Fatalf("replay: Idempotent-Replayed %q, want [true]", got)
	}
}

// TestReplyFieldsCannotFrameTheResponse: a Reply field that names a header
// of the body's framing or of the connection (Content-Type,
// Content-Length, Transfer-Encoding, Connection, ...) or that is not a
// valid header is left out; the response stays the adapter's, and the
// other fields are sent.
func TestReplyFieldsCannotFrameTheResponse(t *testing.T) {
	post := replyServer(t, pipeline.MiddlewareFunc(func(ctx context.Context, inv *pipeline.Invocation, next pipeline.Handler) (any, error) {
		r := inv.Reply()
		for _, name := range []string{"Content-Type", "content-length", "Transfer-Encoding", "Connection", "Keep-Alive",
			"Upgrade", "Trailer", "TE", "Content-Encoding", "Proxy-Connection", "Bad Name"} {
			r.Set(name, "9")
		}
		r.Set("X-Split", "a\r\nX-Injected: 1")
		r.Set("X-Kept", "yes")
		return next(ctx, inv)
	}))
	res := post(`{"fail":true}`, "")
	if res.StatusCode != http.StatusNotFound || res.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("status %d, Content-Type %q; want 404 with the problem's type", res.StatusCode, res.Header.Get("Content-Type"))
	}
	for _, name := range []string{"Connection", "Keep-Alive", "Upgrade", "Trailer", "Te", "Content-Encoding", "Proxy-Connection", "X-Split", "X-Injected"} {
		if v := res.Header.Values(name); len(v) != 0 {
			t.Errorf("%s: %q, want it left out", name, v)
		}
	}
	if res.ContentLength == 9 || len(res.TransferEncoding) != 0 || res.Close {
		t.Errorf("framing taken from the Reply: length %d, transfer %v, close %v", res.ContentLength, res.TransferEncoding, res.Close)
	}
	if res.Header.Get("X-Kept") != "yes" {
		t.Errorf("X-Kept = %q, want the valid field sent", res.Header.Get("X-Kept"))
	}
}
