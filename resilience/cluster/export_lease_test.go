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
	q, idx, local, err := w.(*sharedWindow).take(ctx, nil)
	if local {
		idx = -1
	}
	return q, idx, err
}

// TakeLabelled is w's Take, with the index of the admitting window on the
// server's clock and whether the store did not decide (local): the index
// is then the Local fallback's reading of the server's window, or -1.
func TakeLabelled(w resilience.SharedWindow, ctx context.Context) (q pipeline.Quota, idx int64, local bool, err error) {
	return w.(*sharedWindow).take(ctx, nil)
}

// WaitLabelled is w's Wait for key, as TakeLabelled; q is the store's
// quota of the key's window when it decided. w is a KeyedWindow of a
// Store.
func WaitLabelled(w resilience.SharedKeyedWindow, ctx context.Context, key string) (q pipeline.Quota, idx int64, local bool, err error) {
	return w.(*keyedWindow).wait(ctx, key)
}

// QueueDepth is the number of calls waiting in s, Slots of a Store.
func QueueDepth(s resilience.SharedSlots) int { return s.(*sharedSlots).QueueDepth() }
