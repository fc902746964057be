package grpcadapter

import (
	"cmp"
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience"
)

// TestInboundAttribution runs the inbound context through the kernel's
// DeadlineMiddleware, as a served call does, with the server context
// ending in each of the ways grpc-go ends it.
func TestInboundAttribution(t *testing.T) {
	t.Parallel()
	const deadline = time.Second
	tests := []struct {
		name      string
		tolerance time.Duration
		cancelAt  time.Duration // when the client's RST_STREAM arrives; 0: never
		want      string
	}{
		{"cancel mid-call", DefaultDeadlineTolerance, 300 * time.Millisecond, pipeline.CodeCancelled},
		{"cancel just outside the tolerance", DefaultDeadlineTolerance, deadline - DefaultDeadlineTolerance - time.Millisecond, pipeline.CodeCancelled},
		{"cancel within the tolerance", DefaultDeadlineTolerance, deadline - DefaultDeadlineTolerance, pipeline.CodeTimeout},
		{"cancel just before the deadline", DefaultDeadlineTolerance, deadline - time.Millisecond, pipeline.CodeTimeout},
		{"no tolerance", 0, deadline - time.Millisecond, pipeline.CodeCancelled},
		{"the deadline fires", DefaultDeadlineTolerance, 0, pipeline.CodeTimeout},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				a := &Adapter{cfg: defaultConfig()}
				a.cfg.tolerance = tt.tolerance
				// grpc-go's server context: WithTimeout, cancelled with
				// context.Canceled when the client's RST_STREAM arrives.
				server, cancelServer := context.WithTimeout(context.Background(), deadline)
				defer cancelServer()
				if tt.cancelAt > 0 {
					time.AfterFunc(tt.cancelAt, cancelServer)
				}
				parent, d, stop := a.inbound(server)
				defer stop()
				start := time.Now()
				if want := start.Add(deadline); !d.Equal(want) {
					t.Errorf("inbound deadline = %v, want %v", d, want)
				}
				inv := pipeline.NewInvocation(parent, nil, nil)
				inv.SetDeadline(d)
				var ended time.Duration
				err := resilience.NewDeadlineMiddleware(0, 0).Invoke(inv, func(inv *pipeline.Invocation) error {
					<-inv.Context().Done()
					ended = time.Since(start)
					return inv.Context().Err()
				})
				if got := pipeline.CodeOf(err); got != tt.want {
					t.Errorf("outcome = %s (ended at %v), want %s", got, ended, tt.want)
				}
				if want := cmp.Or(tt.cancelAt, deadline); ended != want {
					t.Errorf("handler context ended at %v, want %v", ended, want)
				}
			})
		})
	}
}

func TestInboundWithoutDeadline(t *testing.T) {
	t.Parallel()
	a := &Adapter{cfg: defaultConfig()}
	ctx, cancel := context.WithCancel(context.Background())
	parent, d, stop := a.inbound(ctx)
	defer stop()
	if parent != ctx || !d.IsZero() {
		t.Errorf("inbound(no deadline) = %v, %v; want the server context itself and no deadline", parent, d)
	}
	cancel()
	if !errors.Is(context.Cause(parent), context.Canceled) {
		t.Errorf("cause = %v, want context.Canceled", context.Cause(parent))
	}
}
