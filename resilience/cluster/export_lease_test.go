package cluster

import (
	"context"

	"github.com/sundial-go/sundial/pipeline"
)

// TakeIndexed is Take, with the index of the admitting window on the
// server's clock (-1 when the OnStoreError fallback decided).
func (w *Window) TakeIndexed(ctx context.Context) (pipeline.Quota, int64, error) {
	return w.take(ctx, nil)
}
