package grpcadapter_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"

	"github.com/sundial-go/sundial/adapters/grpcadapter"
	"github.com/sundial-go/sundial/pipeline"
)

// flakyWatch is a health server whose Watch, a server stream, fails
// with Unavailable: its first failBefore calls before any message, every
// later one after its first message when failAfter is set.
type flakyWatch struct {
	healthpb.UnimplementedHealthServer
	failBefore int32
	failAfter  bool
	calls      atomic.Int32
	requests   chan string // the service each call asked for
}

func (h *flakyWatch) Watch(req *healthpb.HealthCheckRequest, ss healthpb.Health_WatchServer) error {
	h.requests <- req.GetService()
	if h.calls.Add(1) <= h.failBefore {
		return status.Error(codes.Unavailable, "not yet")
	}
	if err := ss.Send(&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}); err != nil {
		return err
	}
	if h.failAfter {
		return status.Error(codes.Unavailable, "gone mid-stream")
	}
	return ss.Send(&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_NOT_SERVING})
}

// watchClient serves h over bufconn and returns a client whose streams
// go through StreamClientInterceptor and a dependency of 3 attempts.
func watchClient(t *testing.T, h *flakyWatch) healthpb.HealthClient {
	return serveHealth(t, h, grpc.WithStreamInterceptor(grpcadapter.StreamClientInterceptor(0)),
		grpc.WithDefaultCallOptions(grpcadapter.WithCallDependency(newDependency(t))))
}

// TestStreamRetriedBeforeTheFirstMessage: a server stream that fails
// before its first message is retried through the dependency, each
// attempt with the caller's request; the caller reads the stream of the
// attempt that answered.
func TestStreamRetriedBeforeTheFirstMessage(t *testing.T) {
	h := &flakyWatch{failBefore: 2, requests: make(chan string, 8)}
	ws, err := watchClient(t, h).Watch(t.Context(), &healthpb.HealthCheckRequest{Service: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	var got []healthpb.HealthCheckResponse_ServingStatus
	for {
		m, err := ws.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("Recv after %v: %v", got, err)
		}
		got = append(got, m.GetStatus())
	}
	if len(got) != 2 || got[0] != healthpb.HealthCheckResponse_SERVING || got[1] != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("messages %v, want SERVING, NOT_SERVING", got)
	}
	if n := h.calls.Load(); n != 3 {
		t.Fatalf("%d attempts, want 3", n)
	}
	for range 3 {
		if s := <-h.requests; s != "orders" {
			t.Fatalf("an attempt's request asked for %q, want orders", s)
		}
	}
}

// TestStreamNotRetriedAfterTheFirstMessage: a server stream that fails
// after its first message is not retried; the failure reaches the
// caller as an outcome.
func TestStreamNotRetriedAfterTheFirstMessage(t *testing.T) {
	h := &flakyWatch{failAfter: true, requests: make(chan string, 8)}
	ws, err := watchClient(t, h).Watch(t.Context(), &healthpb.HealthCheckRequest{Service: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	if m, err := ws.Recv(); err != nil || m.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("first Recv: %v, %v", m, err)
	}
	_, err = ws.Recv()
	if e, ok := errors.AsType[*pipeline.Error](err); !ok || e.Kind() != pipeline.KindUnavailable {
		t.Fatalf("second Recv: %v, want the server's UNAVAILABLE", err)
	}
	if n := h.calls.Load(); n != 1 {
		t.Fatalf("%d attempts, want 1", n)
	}
}

// TestStreamRetryGivesUp: a server stream that fails before its first
// message on every attempt ends with the last attempt's outcome.
func TestStreamRetryGivesUp(t *testing.T) {
	h := &flakyWatch{failBefore: 100, requests: make(chan string, 8)}
	ws, err := watchClient(t, h).Watch(t.Context(), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = ws.Recv()
	if e, ok := errors.AsType[*pipeline.Error](err); !ok || e.Kind() != pipeline.KindUnavailable {
		t.Fatalf("Recv: %v, want UNAVAILABLE", err)
	}
	if _, again := ws.Recv(); again == nil {
		t.Fatal("a second Recv succeeded after the stream failed")
	}
	if n := h.calls.Load(); n != 3 {
		t.Fatalf("%d attempts, want 3 (the policy's)", n)
	}
}

// TestStreamHeaderBeforeTheFirstMessage: a Header before the first Recv
// runs the attempts, and the first whose headers arrive wins.
func TestStreamHeaderBeforeTheFirstMessage(t *testing.T) {
	h := &flakyWatch{failBefore: 2, requests: make(chan string, 8)}
	ws, err := watchClient(t, h).Watch(t.Context(), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ws.Header(); err != nil {
		t.Fatalf("Header: %v", err)
	}
	if m, err := ws.Recv(); err != nil || m.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("Recv: %v, %v", m, err)
	}
	if n := h.calls.Load(); n != 3 {
		t.Fatalf("%d attempts, want 3", n)
	}
}

// refusingSend is a stream interceptor inside StreamClientInterceptor
// whose first refusals SendMsg calls fail with Unavailable before the
// request reaches the stream. grpc-go does not end a stream on its own
// then: only the attempt's end releases it.
type refusingSend struct {
	refusals atomic.Int32
	streams  chan context.Context // each attempt's stream context
}

func (r *refusingSend) intercept(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string,
	streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	cs, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		return nil, err
	}
	r.streams <- cs.Context()
	if r.refusals.Add(-1) >= 0 {
		return refusedStream{cs}, nil
	}
	return cs, nil
}

type refusedStream struct{ grpc.ClientStream }

func (refusedStream) SendMsg(any) error { return status.Error(codes.Unavailable, "refused") }

// rpcEnds counts the client's RPC attempts that began, and tells each end.
type rpcEnds struct {
	begun atomic.Int32
	ended chan struct{}
}

func (c *rpcEnds) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (c *rpcEnds) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}
func (c *rpcEnds) HandleConn(context.Context, stats.ConnStats) {}
func (c *rpcEnds) HandleRPC(_ context.Context, s stats.RPCStats) {
	switch s.(type) {
	case *stats.Begin:
		c.begun.Add(1)
	case *stats.End:
		c.ended <- struct{}{}
	}
}

// TestStreamFailedAttemptsEnd: each failed attempt of a retried server
// stream ends its stream when it fails (its context, and grpc-go's
// attempt with its stats and balancer accounting), not when the
// caller's context ends.
func TestStreamFailedAttemptsEnd(t *testing.T) {
	for _, clocks := range []bool{false, true} {
		t.Run(fmt.Sprintf("clocks=%v", clocks), func(t *testing.T) {
			r := &refusingSend{streams: make(chan context.Context, 8)}
			r.refusals.Store(2)
			ends := &rpcEnds{ended: make(chan struct{}, 8)}
			call := []grpc.CallOption{grpcadapter.WithCallDependency(newDependency(t))}
			if clocks {
				call = append(call, grpcadapter.WithStreamClocks(time.Minute, time.Minute))
			}
			h := &flakyWatch{requests: make(chan string, 8)}
			c := serveHealth(t, h, grpc.WithChainStreamInterceptor(grpcadapter.StreamClientInterceptor(0), r.intercept),
				grpc.WithStatsHandler(ends), grpc.WithDefaultCallOptions(call...))
			ws, err := c.Watch(t.Context(), &healthpb.HealthCheckRequest{Service: "orders"})
			if err != nil {
				t.Fatal(err)
			}
			if m, err := ws.Recv(); err != nil || m.GetStatus() != healthpb.HealthCheckResponse_SERVING {
				t.Fatalf("first Recv: %v, %v", m, err)
			}
			if len(r.streams) != 3 || h.calls.Load() != 1 {
				t.Fatalf("%d attempts, %d reached the server; want 3, 1", len(r.streams), h.calls.Load())
			}
			for i := range 2 {
				if ctx := <-r.streams; ctx.Err() == nil {
					t.Fatalf("failed attempt %d: its stream is still open", i+1)
				}
			}
			if ctx := <-r.streams; ctx.Err() != nil {
				t.Fatalf("the winning attempt's stream ended: %v", ctx.Err())
			}
			if m, err := ws.Recv(); err != nil || m.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
				t.Fatalf("second Recv: %v, %v", m, err)
			}
			if _, err := ws.Recv(); err != io.EOF {
				t.Fatalf("last Recv: %v, want io.EOF", err)
			}
			// Every attempt has ended; grpc-go tells a cancelled one's end
			// on a goroutine of its own. The caller's context is still live.
			for i := range 3 {
				select {
				case <-ends.ended:
				case <-time.After(10 * time.Second):
					t.Fatalf("%d of %d attempts ended", i, ends.begun.Load())
				}
			}
			if n := ends.begun.Load(); n != 3 {
				t.Fatalf("%d attempts began, want 3", n)
			}
		})
	}
}
