package cluster

import (
	"context"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience"
)

// TakeIndexed is w's Take, with the index of the admitting window on the
// server's clock (-1 when the OnStoreError fallback decided). w is a
// Window of a Store.
func TakeIndexed(w resilience.SharedWindow, ctx context.Context) (pipeline.Quota, int64, error) {
	return w.(*sharedWindow).take(ctx, nil)
}

// QueueDepth is the number of calls waiting in s, Slots of a Store.
func QueueDepth(s resilience.SharedSlots) int { return s.(*sharedSlots).QueueDepth() }
