// Package adapters_test holds the one outcome table (docs/pipeline.md)
// that every adapter's mapping is checked against, and the test of the
// project's import layers.
package adapters_test

import (
	"net/http"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/sundial-go/sundial/adapters/cliadapter"
	"github.com/sundial-go/sundial/adapters/grpcadapter"
	"github.com/sundial-go/sundial/adapters/httpadapter"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
)

// outcomeTable is the outcome table of docs/pipeline.md (its protocol
// columns; the breaker column is resilience's, tested there), the single
// source all adapters are tested against.
var outcomeTable = []struct {
	kind pipeline.Kind
	name string
	http int
	grpc codes.Code
	exit int
}{
	{pipeline.KindOK, "OK", http.StatusOK, codes.OK, 0},
	{pipeline.KindValidation, "VALIDATION", 400, codes.InvalidArgument, 2},
	{pipeline.KindUnauthenticated, "UNAUTHENTICATED", 401, codes.Unauthenticated, 4},
	{pipeline.KindForbidden, "FORBIDDEN", 403, codes.PermissionDenied, 4},
	{pipeline.KindNotFound, "NOT_FOUND", 404, codes.NotFound, 3},
	{pipeline.KindConflict, "CONFLICT", 409, codes.AlreadyExists, 5},
	{pipeline.KindUnprocessable, "UNPROCESSABLE", 422, codes.FailedPrecondition, 9},
	{pipeline.KindCanceled, "CANCELLED", 408, codes.Canceled, 8},
	{pipeline.KindTimeout, "TIMEOUT", 504, codes.DeadlineExceeded, 7},
	{pipeline.KindUnavailable, "UNAVAILABLE", 503, codes.Unavailable, 6},
	{pipeline.KindUnexpected, "UNEXPECTED", 500, codes.Internal, 1},
}

func TestOutcomeTable(t *testing.T) {
	if len(outcomeTable) != len(pipelinetest.Kinds()) {
		t.Fatalf("table has %d rows, pipeline has %d kinds", len(outcomeTable), len(pipelinetest.Kinds()))
	}
	for _, row := range outcomeTable {
		t.Run(row.name, func(t *testing.T) {
			if got := row.kind.String(); got != row.name {
				t.Errorf("Kind.String() = %q, want %q", got, row.name)
			}
			if got := httpadapter.StatusFor(row.kind); got != row.http {
				t.Errorf("httpadapter.StatusFor(%s) = %d, want %d", row.kind, got, row.http)
			}
			if got := grpcadapter.CodeFor(row.kind); got != row.grpc {
				t.Errorf("grpcadapter.CodeFor(%s) = %v, want %v", row.kind, got, row.grpc)
			}
			if got := cliadapter.ExitCodeFor(row.kind); got != row.exit {
				t.Errorf("cliadapter.ExitCodeFor(%s) = %d, want %d", row.kind, got, row.exit)
			}
		})
	}
}
