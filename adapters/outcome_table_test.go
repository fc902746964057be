// Package adapters_test holds the one table of DESIGN.md's outcome model
// that every adapter's mapping is checked against.
package adapters_test

import (
	"net/http"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/sundial-go/sundial/adapters/cliadapter"
	"github.com/sundial-go/sundial/adapters/grpcadapter"
	"github.com/sundial-go/sundial/adapters/httpadapter"
	"github.com/sundial-go/sundial/pipeline"
)

// outcomeTable is DESIGN.md's outcome table, the single source all adapters
// are tested against.
var outcomeTable = []struct {
	kind    pipeline.Kind
	name    string
	http    int
	grpc    codes.Code
	exit    int
	breaker bool
}{
	{pipeline.KindOK, "OK", http.StatusOK, codes.OK, 0, false},
	{pipeline.KindValidation, "VALIDATION", 400, codes.InvalidArgument, 2, false},
	{pipeline.KindUnauthenticated, "UNAUTHENTICATED", 401, codes.Unauthenticated, 4, false},
	{pipeline.KindForbidden, "FORBIDDEN", 403, codes.PermissionDenied, 4, false},
	{pipeline.KindNotFound, "NOT_FOUND", 404, codes.NotFound, 3, false},
	{pipeline.KindConflict, "CONFLICT", 409, codes.AlreadyExists, 5, false},
	{pipeline.KindCancelled, "CANCELLED", 408, codes.Canceled, 8, false},
	{pipeline.KindTimeout, "TIMEOUT", 504, codes.DeadlineExceeded, 7, true},
	{pipeline.KindUnavailable, "UNAVAILABLE", 503, codes.Unavailable, 6, true},
	{pipeline.KindUnexpected, "UNEXPECTED", 500, codes.Internal, 1, true},
}

func TestOutcomeTable(t *testing.T) {
	if len(outcomeTable) != len(pipeline.Kinds()) {
		t.Fatalf("table has %d rows, pipeline has %d kinds", len(outcomeTable), len(pipeline.Kinds()))
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
			if got := row.kind.IsBreakerFailure(); got != row.breaker {
				t.Errorf("%s.IsBreakerFailure() = %v, want %v", row.kind, got, row.breaker)
			}
		})
	}
}
