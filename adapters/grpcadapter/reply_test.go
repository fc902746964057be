package grpcadapter_test

import (
	"context"
	"slices"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/pipeline"
)

// replyHarness is a harness with mw as application middleware in the
// diagnostics stage, idempotency keys on work.tiny and the rate limit
// fields on work.limited.
func replyHarness(t *testing.T, mw pipeline.Middleware) *harness {
	return newHarness(t, harnessOpt{kernel: []kernel.Option{
		kernel.WithConfigJSON([]byte(`{"Sundial":{"Kernel":{"Resilience":{"Operations":{"work.tiny":{"Idempotency":{}},
			"work.limited":{"PermitLimit":1,"WindowSeconds":60,"RateLimitHeaders":true}}}}}}`)),
		kernel.UseAt(pipeline.StageDiagnostics, mw),
	}})
}

// TestReplyFieldsAreHeaderMetadata: a field a middleware sets on the
// invocation's Reply is header metadata, its name lower-cased, once, on
// success and on a failed call alike; the rate limit fields of a limited
// operation are sent once beside it.
func TestReplyFieldsAreHeaderMetadata(t *testing.T) {
	h := replyHarness(t, pipeline.MiddlewareFunc(func(ctx context.Context, inv *pipeline.Invocation, next pipeline.Handler) (any, error) {
		inv.Reply().Set("X-Served-By", "replica-a")
		return next(ctx, inv)
	}))
	for _, tc := range []struct {
		full, req string
		code      codes.Code
	}{
		{"/test.v1.Work/Tiny", `{"n": 1}`, codes.OK},
		{"/test.v1.Work/Fail", `{"kind": "NOT_FOUND", "code": "TEST_NOT_FOUND", "message": "No such thing."}`, codes.NotFound},
		{"/test.v1.Work/Limited", `{}`, codes.OK},
	} {
		var md metadata.MD
		_, st := h.call(t.Context(), t, tc.full, tc.req, grpc.Header(&md))
		if st.Code() != tc.code {
			t.Fatalf("%s: %v, want %v", tc.full, st, tc.code)
		}
		if got := md.Get("x-served-by"); !slices.Equal(got, []string{"replica-a"}) {
			t.Errorf("%s: x-served-by %q, want [replica-a]", tc.full, got)
		}
		if tc.full == "/test.v1.Work/Limited" && (len(md.Get("ratelimit-policy")) != 1 || len(md.Get("ratelimit")) != 1) {
			t.Errorf("%s: ratelimit-policy %q, ratelimit %q; want one of each", tc.full, md.Get("ratelimit-policy"), md.Get("ratelimit"))
		}
	}
}

// TestReplyReplayMarkSentOnce: a replayed outcome whose Reply carries the
// replay mark (as the idempotency middleware sets it) is marked once
// (grpc.SetHeader appends: the old slot's mark must not be added too), and
// a first call is not marked.
func TestReplyReplayMarkSentOnce(t *testing.T) {
	h := replyHarness(t, pipeline.MiddlewareFunc(func(ctx context.Context, inv *pipeline.Invocation, next pipeline.Handler) (any, error) {
		out, err := next(ctx, inv)
		return out, err
	}))
	ctx := metadata.AppendToOutgoingContext(t.Context(), "idempotency-key", "k1")
	for i, want := range [][]string{nil, {"true"}} {
		var md metadata.MD
		if _, st := h.call(ctx, t, "/test.v1.Work/Tiny", `{"n": 1}`, grpc.Header(&md)); st != nil {
			t.Fatalf("call %d: %v", i+1, st)
		}
		if got := md.Get("idempotent-replayed"); !slices.Equal(got, want) {
			t.Errorf("call %d: %s %q, want %q", i+1, "idempotent-replayed", got, want)
		}
	}
}

// TestReplyFieldsThatMetadataCannotCarry: a field whose name or value gRPC
// metadata cannot carry is left out; the call and the other fields are not
// affected.
func TestReplyFieldsThatMetadataCannotCarry(t *testing.T) {
	h := replyHarness(t, pipeline.MiddlewareFunc(func(ctx context.Context, inv *pipeline.Invocation, next pipeline.Handler) (any, error) {
		inv.Reply().Set("Bad Name", "x")
		inv.Reply().Set("grpc-status", "0")
		inv.Reply().Set("X-Line", "a\nb")
		inv.Reply().Set("X-Good", "ok")
		return next(ctx, inv)
	}))
	var md metadata.MD
	if _, st := h.call(t.Context(), t, "/test.v1.Work/Tiny", `{"n": 1}`, grpc.Header(&md)); st.Code() != codes.OK {
		t.Fatalf("call: %v, want OK", st)
	}
	if got := md.Get("x-good"); !slices.Equal(got, []string{"ok"}) {
		t.Errorf("x-good %q, want [ok]", got)
	}
	for _, k := range []string{"bad name", "x-line"} {
		if got := md.Get(k); len(got) != 0 {
			t.Errorf("%s %q, want none", k, got)
		}
	}
}
