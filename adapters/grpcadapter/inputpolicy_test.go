package grpcadapter_test

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/sundial-go/sundial/operations"
)

type lenientIn struct {
	DelayMs int `json:"delayMs"`
}

// TestInputPolicyOverGRPC: a field number the request's schema does not
// have (what a client built from a newer schema sends) is InvalidArgument
// KERNEL_VALIDATION_003 naming it ("#9"), the answer HTTP and the CLI give
// for an unknown field; an operation whose InputPolicy allows unknown
// fields runs.
func TestInputPolicyOverGRPC(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpt{register: func(t testing.TB, reg *operations.Registry) {
		err := operations.Register(reg, operations.Descriptor{ID: "lenient.run", InputPolicy: operations.InputPolicy{AllowUnknownFields: true}},
			func(context.Context, lenientIn) (struct{}, error) { return struct{}{}, nil })
		if err != nil {
			t.Fatal(err)
		}
	}})
	send := func(full string) error {
		m := h.method(t, full)
		req := dynamicpb.NewMessage(m.Input)
		unknown := protowire.AppendTag(nil, 9, protowire.VarintType)
		req.SetUnknown(protowire.AppendVarint(unknown, 1))
		return h.conn.Invoke(t.Context(), full, req, dynamicpb.NewMessage(m.Output))
	}
	st := status.Convert(send("/test.v1.Work/Run"))
	if ei := errorInfo(t, st); st.Code() != codes.InvalidArgument || ei.GetReason() != operations.CodeUnknownField || ei.GetMetadata()["field"] != "#9" {
		t.Errorf("Work/Run with unknown field 9 = %v %v, want InvalidArgument %s field #9", st, ei, operations.CodeUnknownField)
	}
	if err := send("/test.v1.Lenient/Run"); err != nil {
		t.Errorf("Lenient/Run (unknown fields allowed) with unknown field 9 = %v, want OK", err)
	}
}
