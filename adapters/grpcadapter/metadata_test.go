package grpcadapter_test

import (
	"context"
	"io"
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

// watch sends the tenant twice, with a header and a trailer.
func watch(ctx context.Context, _ quotaIn, s *operations.Sender[quotaOut]) error {
	md := operations.MetadataFrom(ctx)
	md.AddHeader("X-Served-By", "sundial")
	md.AddTrailer("X-Checksum", "c0ffee")
	for range 2 {
		if err := s.Send(quotaOut{Tenant: md.Request().Get("X-Tenant")}); err != nil {
			return err
		}
	}
	return nil
}

func quotaHarness(t *testing.T) *harness {
	return newHarness(t, harnessOpt{register: func(t testing.TB, reg *operations.Registry) {
		if err := operations.Register(reg, operations.Descriptor{ID: "quota.check"}, quota); err != nil {
			t.Fatal(err)
		}
		if err := operations.RegisterServerStream(reg, operations.Descriptor{ID: "quota.watch"}, watch); err != nil {
			t.Fatal(err)
		}
	}})
}

// TestHandlerMetadataOverAGRPCStream: a stream's handler reads the
// request metadata; its header comes with the first message, its
// trailer at the end.
func TestHandlerMetadataOverAGRPCStream(t *testing.T) {
	h := quotaHarness(t)
	ctx := metadata.AppendToOutgoingContext(t.Context(), "x-tenant", "acme")
	cs, m := h.openStream(ctx, t, h.conn, "/test.v1.Quota/Watch")
	send(t, cs, m.Input, nil)
	if err := cs.CloseSend(); err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		msg := newMessage(m.Output)
		if err := cs.RecvMsg(msg); err != nil {
			if err != io.EOF {
				t.Fatal(err)
			}
			break
		}
		if got := msg.Get(m.Output.Fields().ByName("tenant")).String(); got != "acme" {
			t.Errorf("message %d: tenant %q, want acme", n, got)
		}
		n++
	}
	hdr, err := cs.Header()
	if tl := cs.Trailer().Get("x-checksum"); err != nil || n != 2 || len(hdr.Get("x-served-by")) != 1 || len(tl) != 1 {
		t.Errorf("%d messages, header %v (%v), trailer %v; want 2, x-served-by, x-checksum", n, hdr, err, cs.Trailer())
	}
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
