package grpcadapter_test

import (
	"context"
	"io"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sundial-go/sundial/adapters/grpcadapter"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
)

func TestUnaryClientInterceptorCaps(t *testing.T) {
	t.Parallel()
	const none = time.Duration(-1)
	tests := []struct {
		name     string
		parent   time.Duration // the caller's remaining time; none: no deadline
		timeout  time.Duration // the interceptor's per-call timeout
		opts     []grpc.CallOption
		want     time.Duration // the deadline the call sees, from now; none: no deadline
		sameCtx  bool          // the call keeps the caller's context (nothing to add)
		wantNote string
	}{
		{name: "cap shorter than remaining", parent: 2 * time.Second, timeout: 300 * time.Millisecond, want: 300 * time.Millisecond},
		{name: "never extends", parent: 100 * time.Millisecond, timeout: time.Second, want: 100 * time.Millisecond, sameCtx: true},
		{name: "cap without a parent deadline", parent: none, timeout: time.Second, want: time.Second},
		{name: "no cap, no deadline", parent: none, timeout: 0, want: none, sameCtx: true},
		{name: "no cap keeps the parent's", parent: 5 * time.Second, timeout: 0, want: 5 * time.Second, sameCtx: true},
		{name: "per-call override shortens", parent: 2 * time.Second, timeout: time.Second, opts: []grpc.CallOption{grpcadapter.WithCallTimeout(50 * time.Millisecond)}, want: 50 * time.Millisecond},
		{name: "per-call override cannot extend", parent: 2 * time.Second, timeout: time.Second, opts: []grpc.CallOption{grpcadapter.WithCallTimeout(time.Hour)}, want: 2 * time.Second, sameCtx: true},
		{name: "per-call zero removes the cap", parent: none, timeout: time.Second, opts: []grpc.CallOption{grpcadapter.WithCallTimeout(0)}, want: none, sameCtx: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				if tt.parent != none {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, tt.parent)
					defer cancel()
				}
				start := time.Now()
				var seen context.Context
				invoker := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
					seen = ctx
					return nil
				}
				icpt := grpcadapter.UnaryClientInterceptor(tt.timeout)
				if err := icpt(ctx, "/x.v1.S/M", nil, nil, nil, invoker, tt.opts...); err != nil {
					t.Fatal(err)
				}
				d, ok := seen.Deadline()
				switch {
				case tt.want == none && ok:
					t.Errorf("the call's deadline = %v from now, want none", d.Sub(start))
				case tt.want != none && (!ok || d.Sub(start) != tt.want):
					t.Errorf("the call's deadline = %v from now (%v), want %v", d.Sub(start), ok, tt.want)
				}
				if (seen == ctx) != tt.sameCtx {
					t.Errorf("the call got the caller's own context = %v, want %v", seen == ctx, tt.sameCtx)
				}
			})
		})
	}
}

// TestUnaryClientInterceptorTimeout checks that the per-call cap ends the
// call with a TIMEOUT outcome while the caller's context is still alive.
func TestUnaryClientInterceptorTimeout(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		invoker := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
			<-ctx.Done()
			return status.FromContextError(ctx.Err()).Err()
		}
		start := time.Now()
		err := grpcadapter.UnaryClientInterceptor(200*time.Millisecond)(ctx, "/x.v1.S/M", nil, nil, nil, invoker)
		if took := time.Since(start); took != 200*time.Millisecond {
			t.Errorf("call took %v, want 200ms", took)
		}
		if e := pipeline.AsError(err); e.Kind() != pipeline.KindTimeout || e.Code() != "GRPC_DEADLINE_EXCEEDED" || status.Code(err) != codes.DeadlineExceeded {
			t.Errorf("call = %v (%s), want TIMEOUT GRPC_DEADLINE_EXCEEDED with status DeadlineExceeded", err, e.Kind())
		}
		if ctx.Err() != nil {
			t.Errorf("the caller's context ended: %v", ctx.Err())
		}
	})
}

type fakeClientStream struct {
	ctx   context.Context
	recvs []error
}

func (f *fakeClientStream) Header() (metadata.MD, error) { return nil, nil }
func (f *fakeClientStream) Trailer() metadata.MD         { return nil }
func (f *fakeClientStream) CloseSend() error             { return nil }
func (f *fakeClientStream) Context() context.Context     { return f.ctx }
func (f *fakeClientStream) SendMsg(any) error            { return nil }
func (f *fakeClientStream) RecvMsg(any) error {
	err := f.recvs[0]
	f.recvs = f.recvs[1:]
	return err
}

func TestStreamClientInterceptor(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		recvs []error
		last  func(error) bool
	}{
		{"ends with EOF", []error{nil, io.EOF}, func(err error) bool { return err == io.EOF }},
		{"ends with a status", []error{nil, status.Error(codes.Unavailable, "down")}, func(err error) bool {
			return pipelinetest.KindOf(err) == pipeline.KindUnavailable && status.Code(err) == codes.Unavailable
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				var streamCtx context.Context
				streamer := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
					streamCtx = ctx
					return &fakeClientStream{ctx: ctx, recvs: tt.recvs}, nil
				}
				cs, err := grpcadapter.StreamClientInterceptor(time.Minute)(context.Background(), &grpc.StreamDesc{}, nil, "/x.v1.S/Watch", streamer)
				if err != nil {
					t.Fatal(err)
				}
				if d, ok := streamCtx.Deadline(); !ok || time.Until(d) != time.Minute {
					t.Fatalf("stream deadline = %v, %v, want 1m from now", time.Until(d), ok)
				}
				if err := cs.RecvMsg(nil); err != nil || streamCtx.Err() != nil {
					t.Fatalf("first RecvMsg = %v, stream context %v; want nil, alive", err, streamCtx.Err())
				}
				if err := cs.RecvMsg(nil); !tt.last(err) {
					t.Errorf("last RecvMsg = %v", err)
				}
				if streamCtx.Err() != context.Canceled {
					t.Errorf("stream context after the end = %v, want released (canceled)", streamCtx.Err())
				}
			})
		})
	}
}
