package rpccall

import (
	"fmt"
	"testing"

	rpccode "google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/grpc/codes"

	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
)

// TestCodesBothWays: every gRPC code reads as one kind, and that kind's
// code reads as the same kind. A code is the one its kind is answered
// with, or one of the three codes that share a kind. Every kind's code
// reads back as the kind. An outcome's stable code is GRPC_ and the
// code's name in google.rpc.Code.
func TestCodesBothWays(t *testing.T) {
	t.Parallel()
	shared := map[codes.Code]bool{codes.OutOfRange: true, codes.Aborted: true, codes.ResourceExhausted: true}
	for c := range codes.Code(19) {
		kind, code := operations.CodeOutcome(c)
		if got := KindFor(c); got != kind {
			t.Errorf("KindFor(%v) = %s, CodeOutcome says %s", c, got, kind)
		}
		name, named := rpccode.Code_name[int32(c)]
		want := "GRPC_" + name
		if !named {
			want = fmt.Sprintf("GRPC_CODE(%d)", c)
		}
		if code != want {
			t.Errorf("CodeOutcome(%v) code %q, want %q", c, code, want)
		}
		back := CodeFor(kind)
		if KindFor(back) != kind {
			t.Errorf("%v reads as %s, answered as %v, which reads as %s", c, kind, back, KindFor(back))
		}
		if back != c && !shared[c] && kind != pipeline.KindUnexpected {
			t.Errorf("%v reads as %s, which is answered as %v", c, kind, back)
		}
		if !named && kind != pipeline.KindUnexpected {
			t.Errorf("unknown code %v reads as %s, want UNEXPECTED", c, kind)
		}
	}
	for _, k := range pipelinetest.Kinds() {
		if got := KindFor(CodeFor(k)); got != k {
			t.Errorf("KindFor(CodeFor(%s)) = %s", k, got)
		}
	}
}
