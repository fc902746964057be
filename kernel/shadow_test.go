package kernel_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/kernel/internal/observe"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
	"github.com/sundial-go/sundial/resilience"
)

// TestShadowReported: with "Shadow": true, a window of 2 and a breaker
// opened by one failure turn nothing away; the calls they would have
// rejected are the metric sundial.rejection.shadow by reason and the
// operation's Shadowed status, and sundial.rejection.count stays 0.
func TestShadowReported(t *testing.T) {
	k, _, reader := observedKernel(t, `{"Sundial":{"Kernel":{"Resilience":{"Shadow":true,"Operations":{
		"test.echo":{"PermitLimit":2,"WindowSeconds":3600,"QueueLimit":4},
		"test.fail":{"FailureThreshold":1,"BreakSeconds":30}}}}}}`)
	ctx := context.Background()
	for i := range 5 {
		if o := k.Op("test.echo").Invoke(ctx, kernel.Unary{Input: &echoIn{}}); o.Err != nil {
			t.Fatalf("echo %d: %v", i+1, o.Err)
		}
	}
	for i := range 3 {
		if o := k.Op("test.fail").Invoke(ctx, kernel.Unary{Input: &echoIn{}}); pipelinetest.CodeOf(o.Err) != "TEST_UNAVAILABLE_001" {
			t.Fatalf("fail %d: %v, want the handler's own outcome", i+1, o.Err)
		}
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	got := sumsBy(rm, observe.MetricShadowRejectionCount, func(a attribute.Set) string {
		op, _ := a.Value(attribute.Key(observe.MetricAttrOperation))
		reason, _ := a.Value(attribute.Key(observe.MetricAttrReason))
		return op.AsString() + "/" + reason.AsString()
	})
	want := map[string]int64{"test.echo/rate": 3, "test.echo/concurrency": 0, "test.echo/breaker": 0,
		"test.fail/rate": 0, "test.fail/concurrency": 0, "test.fail/breaker": 2}
	for key, n := range want {
		if got[key] != n {
			t.Errorf("%s{%s} = %d, want %d (all: %v)", observe.MetricShadowRejectionCount, key, got[key], n, got)
		}
	}
	if n := sumOf(rm, observe.MetricRejectionCount); n != 0 {
		t.Errorf("%s = %d, want 0", observe.MetricRejectionCount, n)
	}
	for _, op := range k.Status().Operations {
		wantShadowed := map[string]resilience.Rejections{"test.echo": {Rate: 3}, "test.fail": {Breaker: 2}}[op.ID]
		if op.Shadowed != wantShadowed || op.Rejections != (resilience.Rejections{}) || !op.Policy.Shadow {
			t.Errorf("status of %s: shadowed %+v, rejections %+v; want %+v, none", op.ID, op.Shadowed, op.Rejections, wantShadowed)
		}
	}
}
