package kernel_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/baggage"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/kernel/telemetry"
)

// TestIdempotencyKeyFromBaggage: without a protocol header's key, the
// invocation's idempotency key is the baggage's; a header's key wins.
func TestIdempotencyKeyFromBaggage(t *testing.T) {
	k, err := kernel.New(kernel.WithRegistry(newRegistry(t, nil)))
	if err != nil {
		t.Fatal(err)
	}
	m, _ := baggage.NewMemberRaw(telemetry.BaggageIdempotencyKey, "k1")
	b, _ := baggage.New(m)
	ctx := baggage.ContextWithBaggage(context.Background(), b)
	if o := k.Handle(ctx, kernel.Request{Operation: "test.echo", Input: &echoIn{}}); o.Invocation.IdempotencyKey() != "k1" {
		t.Errorf("IdempotencyKey() = %q, want k1 from the baggage", o.Invocation.IdempotencyKey())
	}
	o := k.Handle(ctx, kernel.Request{Operation: "test.echo", Input: &echoIn{}, IdempotencyKey: "explicit"})
	if o.Invocation.IdempotencyKey() != "explicit" {
		t.Errorf("IdempotencyKey() = %q, want the header's", o.Invocation.IdempotencyKey())
	}
}
