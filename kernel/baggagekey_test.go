package kernel_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/baggage"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/kernel/propagation"
)

// TestIdempotencyKeyFromBaggage: without a protocol header's key, the
// invocation's idempotency key is the baggage's; a header's key wins.
func TestIdempotencyKeyFromBaggage(t *testing.T) {
	k, err := kernel.New(kernel.WithRegistry(newRegistry(t, nil)))
	if err != nil {
		t.Fatal(err)
	}
	m, _ := baggage.NewMemberRaw(propagation.BaggageIdempotencyKey, "k1")
	b, _ := baggage.New(m)
	ctx := baggage.ContextWithBaggage(context.Background(), b)
	if o := k.Op("test.echo").Handle(ctx, kernel.Unary{Input: &echoIn{}}); o.Invocation.IdempotencyKey() != "k1" {
		t.Errorf("IdempotencyKey() = %q, want k1 from the baggage", o.Invocation.IdempotencyKey())
	}
	o := k.Op("test.echo").Handle(ctx, kernel.Unary{Caller: kernel.Caller{IdempotencyKey: "explicit"}, Input: &echoIn{}})
	if o.Invocation.IdempotencyKey() != "explicit" {
		t.Errorf("IdempotencyKey() = %q, want the header's", o.Invocation.IdempotencyKey())
	}
}
