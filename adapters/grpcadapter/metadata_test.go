package grpcadapter_test

import (
	"context"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sundial-go/sundial/operations"
)

type quotaIn struct {
	Over bool `json:"over"`
}

type quotaOut struct {
	Tenant string `json:"tenant"`
}

// quota reads the caller's x-tenant metadata, sets a header and a
// trailer, and, over its quota, answers ResourceExhausted with a
// QuotaFailure of its own.
func quota(ctx context.Context, in quotaIn) (quotaOut, error) {
	md := operations.MetadataFrom(ctx)
	md.AddHeader("X-Served-By", "sundial")
	md.AddTrailer("X-Checksum", "c0ffee")
	md.AddTrailer("Grpc-Status", "0") // gRPC's: never sent
	tenant := md.Request().Get("X-Tenant")
	if !in.Over {
		return quotaOut{Tenant: tenant}, nil
	}
	st, err := status.New(codes.ResourceExhausted, "tenant "+tenant+" used its 10 calls").
		WithDetails(&errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{Subject: "tenant:" + tenant}}})
	if err != nil {
		return quotaOut{}, err
	}
	return quotaOut{}, st.Err()
}

func quotaHarness(t *testing.T) *harness {
	return newHarness(t, harnessOpt{register: func(t testing.TB, reg *operations.Registry) {
		if err := operations.Register(reg, operations.Descriptor{ID: "quota.check"}, quota); err != nil {
			t.Fatal(err)
		}
	}})
}

// TestHandlerMetadataOverGRPC: the handler reads the caller's request
// metadata; the header and trailer it sets are header and trailer
// metadata, on success and on failure.
func TestHandlerMetadataOverGRPC(t *testing.T) {
	h := quotaHarness(t)
	ctx := metadata.AppendToOutgoingContext(t.Context(), "x-tenant", "acme")
	for _, req := range []string{`{}`, `{"over":true}`} {
		var hdr, trl metadata.MD
		out, _ := h.call(ctx, t, "/test.v1.Quota/Check", req, grpc.Header(&hdr), grpc.Trailer(&trl))
		if req == `{}` && out != `{"tenant":"acme"}` {
			t.Errorf("%s: %s; want the tenant the handler read", req, out)
		}
		if got, tl := hdr.Get("x-served-by"), trl.Get("x-checksum"); len(got) != 1 || got[0] != "sundial" ||
			len(tl) != 1 || tl[0] != "c0ffee" {
			t.Errorf("%s: header %q, trailer %q; want [sundial], [c0ffee]", req, got, tl)
		}
	}
}

// TestHandlerStatusOverGRPC: a handler's own status is the call's
// status: its code, message and details, and no ErrorInfo of Sundial's.
// The call log has the code GRPC_RESOURCE_EXHAUSTED.
func TestHandlerStatusOverGRPC(t *testing.T) {
	h := quotaHarness(t)
	ctx := metadata.AppendToOutgoingContext(t.Context(), "x-tenant", "acme")
	_, st := h.call(ctx, t, "/test.v1.Quota/Check", `{"over":true}`)
	if st.Code() != codes.ResourceExhausted || st.Message() != "tenant acme used its 10 calls" {
		t.Fatalf("status %v; want ResourceExhausted with the handler's message", st)
	}
	ds := st.Details()
	if q, ok := ds[0].(*errdetails.QuotaFailure); len(ds) != 1 || !ok || q.GetViolations()[0].GetSubject() != "tenant:acme" {
		t.Errorf("details %v; want the handler's QuotaFailure alone", ds)
	}
	h.waitLog(t, "grpc call", "method=/test.v1.Quota/Check", "code=GRPC_RESOURCE_EXHAUSTED")
}
