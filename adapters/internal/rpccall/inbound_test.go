package rpccall

import (
	"cmp"
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
)

// TestInboundAttribution runs a host call through the kernel under the
// inbound context, as a served call does, with the server context ending
// in each of the ways grpc-go ends it.
func TestInboundAttribution(t *testing.T) {
	t.Parallel()
	const deadline = time.Second
	tests := []struct {
		name      string
		tolerance time.Duration
		cancelAt  time.Duration // when the client's RST_STREAM arrives; 0: never
		want      string
	}{
		{"cancel mid-call", DefaultTolerance, 300 * time.Millisecond, pipeline.CodeCanceled},
		{"cancel just outside the tolerance", DefaultTolerance, deadline - DefaultTolerance - time.Millisecond, pipeline.CodeCanceled},
		{"cancel within the tolerance", DefaultTolerance, deadline - DefaultTolerance, pipeline.CodeTimeout},
		{"cancel just before the deadline", DefaultTolerance, deadline - time.Millisecond, pipeline.CodeTimeout},
		{"no tolerance", 0, deadline - time.Millisecond, pipeline.CodeCanceled},
		{"the deadline fires", DefaultTolerance, 0, pipeline.CodeTimeout},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				k, err := kernel.New(kernel.WithTelemetry(false))
				if err != nil {
					t.Fatal(err)
				}
				a := New(k, Config{Tolerance: tt.tolerance, BaggageLimit: DefaultBaggageLimit})
				// grpc-go's server context: WithTimeout, canceled with
				// context.Canceled when the client's RST_STREAM arrives.
				server, cancelServer := context.WithTimeout(context.Background(), deadline)
				defer cancelServer()
				if tt.cancelAt > 0 {
					time.AfterFunc(tt.cancelAt, cancelServer)
				}
				parent, stop := a.Inbound(server)
				defer stop()
				start := time.Now()
				var ended time.Duration
				o := k.Host(parent, kernel.HostCall{Caller: kernel.Caller{Protocol: pipeline.ProtocolGRPC, Route: "/x.v1.S/M"}, Handler: func(ctx context.Context, _ *pipeline.Invocation) (any, error) {
					<-ctx.Done()
					ended = time.Since(start)
					return nil, ctx.Err()
				}, Guarded: true})
				if got := pipelinetest.CodeOf(o.Err); got != tt.want {
					t.Errorf("outcome = %s (ended at %v), want %s", got, ended, tt.want)
				}
				if o.Expired {
					t.Error("the outcome is the guard's, want the chain's")
				}
				if want := cmp.Or(tt.cancelAt, deadline); ended != want {
					t.Errorf("handler context ended at %v, want %v", ended, want)
				}
				if d, ok := pipelinetest.CallerDeadline(o.Invocation); !ok || !d.Equal(start.Add(deadline)) {
					t.Errorf("caller's deadline = %v, %v; want %v", d, ok, start.Add(deadline))
				}
				if src := o.Invocation.Timing().Source; src != pipeline.DeadlineCaller {
					t.Errorf("deadline source = %v, want caller", src)
				}
			})
		})
	}
}

func TestInboundWithoutDeadline(t *testing.T) {
	t.Parallel()
	a := &Server{cfg: Config{Tolerance: DefaultTolerance}}
	ctx, cancel := context.WithCancel(context.Background())
	parent, stop := a.Inbound(ctx)
	defer stop()
	if parent != ctx {
		t.Errorf("inbound(no deadline) = %v, want the server context itself", parent)
	}
	cancel()
	if !errors.Is(context.Cause(parent), context.Canceled) {
		t.Errorf("cause = %v, want context.Canceled", context.Cause(parent))
	}
}
