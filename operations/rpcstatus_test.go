package operations_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
)

// runWith registers a handler that returns err and runs it once.
func runWith(t *testing.T, err error) error {
	t.Helper()
	reg := operations.NewRegistry()
	if e := operations.Register(reg, operations.Descriptor{ID: "rpc.status"},
		func(context.Context, struct{}) (struct{}, error) { return struct{}{}, err }); e != nil {
		t.Fatal(e)
	}
	d, _ := reg.Lookup("rpc.status")
	_, got := d.Handler()(t.Context(), pipeline.NewInvocation(pipeline.Spec{Operation: d}))
	return got
}

// okStatus is an error whose status says OK.
type okStatus struct{}

func (okStatus) Error() string              { return "all is well?" }
func (okStatus) GRPCStatus() *status.Status { return status.New(codes.OK, "") }

// TestHandlerStatusKinds: an error that carries an RPC status is an
// outcome of its code's kind, coded GRPC_<CODE>, with the status's
// message. Any other error is left as it is: an outcome, an error
// without a status, and one whose status says OK.
func TestHandlerStatusKinds(t *testing.T) {
	for _, tc := range []struct {
		code codes.Code
		kind pipeline.Kind
		name string
	}{
		{codes.Canceled, pipeline.KindCanceled, "GRPC_CANCELLED"},
		{codes.Unknown, pipeline.KindUnexpected, "GRPC_UNKNOWN"},
		{codes.InvalidArgument, pipeline.KindValidation, "GRPC_INVALID_ARGUMENT"},
		{codes.DeadlineExceeded, pipeline.KindTimeout, "GRPC_DEADLINE_EXCEEDED"},
		{codes.NotFound, pipeline.KindNotFound, "GRPC_NOT_FOUND"},
		{codes.AlreadyExists, pipeline.KindConflict, "GRPC_ALREADY_EXISTS"},
		{codes.PermissionDenied, pipeline.KindForbidden, "GRPC_PERMISSION_DENIED"},
		{codes.ResourceExhausted, pipeline.KindUnavailable, "GRPC_RESOURCE_EXHAUSTED"},
		{codes.FailedPrecondition, pipeline.KindUnprocessable, "GRPC_FAILED_PRECONDITION"},
		{codes.Aborted, pipeline.KindConflict, "GRPC_ABORTED"},
		{codes.OutOfRange, pipeline.KindValidation, "GRPC_OUT_OF_RANGE"},
		{codes.Unimplemented, pipeline.KindUnexpected, "GRPC_UNIMPLEMENTED"},
		{codes.Internal, pipeline.KindUnexpected, "GRPC_INTERNAL"},
		{codes.Unavailable, pipeline.KindUnavailable, "GRPC_UNAVAILABLE"},
		{codes.DataLoss, pipeline.KindUnexpected, "GRPC_DATA_LOSS"},
		{codes.Unauthenticated, pipeline.KindUnauthenticated, "GRPC_UNAUTHENTICATED"},
	} {
		orig := status.Error(tc.code, "the message")
		e := pipeline.AsError(runWith(t, orig))
		if e.Kind() != tc.kind || e.Code() != tc.name || e.Message() != "the message" || !errors.Is(e, orig) {
			t.Errorf("%v: %v %s %q; want %v %s", tc.code, e.Kind(), e.Code(), e.Message(), tc.kind, tc.name)
		}
		if st, ok := status.FromError(e); !ok || st.Code() != tc.code {
			t.Errorf("%v: the outcome's status %v, want the handler's", tc.code, st)
		}
	}
	// A wrapped status is not the handler's answer: its text, and the
	// status of a call it made, stay with it. Nor is a nil status.
	wrapped := fmt.Errorf("charging 10.0.3.7: %w", status.Error(codes.Unavailable, "ledger down"))
	for _, err := range []error{io.EOF, pipeline.NewError(pipeline.KindNotFound, "APP_NOT_FOUND", "x"), okStatus{}, wrapped, nilStatus{}} {
		if got := runWith(t, err); got != err {
			t.Errorf("%v became %v; want it as it is", err, got)
		}
	}
}

// TestMetadata: a call's request headers read in canonical form; what is
// set after the headers or trailers were sent is dropped; a nil Metadata
// reads as empty and drops what is set.
func TestMetadata(t *testing.T) {
	loads := 0
	ctx, md := operations.WithMetadata(t.Context(), func() http.Header {
		loads++
		return http.Header{"x-tenant": {"acme"}}
	})
	if operations.MetadataFrom(ctx) != md || md.Request().Get("X-Tenant") != "acme" || md.Request().Get("x-tenant") != "acme" || loads != 1 {
		t.Errorf("request %v after %d loads; want X-Tenant acme, one load", md.Request(), loads)
	}
	md.AddHeader("A", "1")
	md.AddTrailer("B", "2")
	if h := md.SendHeader(); h.Get("A") != "1" {
		t.Errorf("header %v, want A: 1", h)
	}
	md.AddHeader("Late", "x")
	md.AddTrailer("C", "3")
	if tr := md.SendTrailer(); tr.Get("B") != "2" || tr.Get("C") != "3" {
		t.Errorf("trailer %v, want B: 2, C: 3", tr)
	}
	md.AddTrailer("Late", "x")
	if md.SendHeader().Get("Late") != "" || md.SendTrailer().Get("Late") != "" {
		t.Error("a header or trailer set once sent was kept")
	}
	var none *operations.Metadata = operations.MetadataFrom(context.Background())
	none.AddHeader("A", "1")
	if none != nil || len(none.Request()) != 0 || none.SendHeader() != nil || none.SendTrailer() != nil {
		t.Error("a call without metadata is not empty")
	}
}

// nilStatus carries a nil status.
type nilStatus struct{}

func (nilStatus) Error() string              { return "no status" }
func (nilStatus) GRPCStatus() *status.Status { return nil }
