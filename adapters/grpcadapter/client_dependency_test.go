package grpcadapter_test

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/sundial-go/sundial/adapters/grpcadapter"
	"github.com/sundial-go/sundial/kernel/propagation"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience/outbound"
)

// flakyHealth answers Unavailable to its first fail calls, then SERVING,
// and records each call's baggage.
type flakyHealth struct {
	healthpb.UnimplementedHealthServer
	fail     int
	code     codes.Code
	pushback string // the grpc-retry-pushback-ms trailer of a failure, if set

	mu      sync.Mutex
	baggage []string
	at      []time.Time // when each call arrived
}

func (h *flakyHealth) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	h.mu.Lock()
	h.baggage = append(h.baggage, strings.Join(md.Get("baggage"), ","))
	h.at = append(h.at, time.Now())
	n := len(h.baggage)
	h.mu.Unlock()
	if n <= h.fail {
		if h.pushback != "" {
			_ = grpc.SetTrailer(ctx, metadata.Pairs("grpc-retry-pushback-ms", h.pushback))
		}
		return nil, status.Error(h.code, "not yet")
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

// healthClient serves h with grpc-go over bufconn and returns a client
// whose calls go through d.
func healthClient(t *testing.T, h *flakyHealth, d *outbound.Dependency) healthpb.HealthClient {
	return serveHealth(t, h, grpc.WithUnaryInterceptor(grpcadapter.UnaryClientInterceptor(0)),
		grpc.WithDefaultCallOptions(grpcadapter.WithCallDependency(d)))
}

// serveHealth serves h with grpc-go over bufconn and returns a client
// dialled with opts.
func serveHealth(t *testing.T, h healthpb.HealthServer, opts ...grpc.DialOption) healthpb.HealthClient {
	t.Helper()
	ln := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, h)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return ln.DialContext(ctx) }))
	cc, err := grpc.NewClient("passthrough:///bufnet", opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return healthpb.NewHealthClient(cc)
}

func newDependency(t *testing.T) *outbound.Dependency {
	p := outbound.DefaultPolicy()
	p.BackoffBase, p.BackoffMax = time.Millisecond, 2*time.Millisecond
	d, err := outbound.New("inventory", p)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestClientDependencyRetriesUnavailable: a real server answers
// Unavailable twice: the third attempt's answer reaches the caller, and
// every attempt carried the caller's idempotency key.
func TestClientDependencyRetriesUnavailable(t *testing.T) {
	h := &flakyHealth{fail: 2, code: codes.Unavailable}
	c := healthClient(t, h, newDependency(t))
	ctx, _ := propagation.WithIdempotencyKey(t.Context(), "reserve-9")
	resp, err := c.Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("resp %v, err %v", resp, err)
	}
	if len(h.baggage) != 3 {
		t.Fatalf("%d attempts, want 3", len(h.baggage))
	}
	for i, b := range h.baggage {
		if !strings.Contains(b, "reserve-9") {
			t.Fatalf("attempt %d baggage %q lacks the key", i+1, b)
		}
	}
}

// TestClientDependencyNeverRetriesCallerFault: InvalidArgument is the
// caller's fault: one attempt, its outcome returned.
func TestClientDependencyNeverRetriesCallerFault(t *testing.T) {
	h := &flakyHealth{fail: 5, code: codes.InvalidArgument}
	c := healthClient(t, h, newDependency(t))
	ctx, _ := propagation.WithIdempotencyKey(t.Context(), "reserve-9")
	_, err := c.Check(ctx, &healthpb.HealthCheckRequest{})
	if pipeline.AsError(err).Kind() != pipeline.KindValidation || len(h.baggage) != 1 {
		t.Fatalf("err %v after %d attempts, want VALIDATION after 1", err, len(h.baggage))
	}
}

// TestClientDependencyHonoursPushback: a server's grpc-retry-pushback-ms
// trailer (gRFC A6) is the wait before the retry, replacing the 1–2 ms
// backoff; a negative or unreadable one, or one past the deadline, ends
// the call after its first attempt with the server's answer.
func TestClientDependencyHonoursPushback(t *testing.T) {
	inBubble(t, testClientDependencyHonoursPushback)
}

func testClientDependencyHonoursPushback(t *testing.T) {
	h := &flakyHealth{fail: 1, code: codes.Unavailable, pushback: "150"}
	c := healthClient(t, h, newDependency(t))
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if _, err := c.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	if len(h.at) != 2 {
		t.Fatalf("%d attempts, want 2", len(h.at))
	}
	if gap := h.at[1].Sub(h.at[0]); gap != 150*time.Millisecond {
		t.Errorf("the retry came %v after the first attempt, want the 150 ms pushback", gap)
	}

	for _, tt := range []struct {
		pushback string
		timeout  time.Duration
	}{{"-1", 5 * time.Second}, {"soon", 5 * time.Second}, {"99999999999999999999", 5 * time.Second}, {"2000", time.Second}} {
		h := &flakyHealth{fail: 5, code: codes.Unavailable, pushback: tt.pushback}
		c := healthClient(t, h, newDependency(t))
		ctx, cancel := context.WithTimeout(t.Context(), tt.timeout)
		start := time.Now()
		_, err := c.Check(ctx, &healthpb.HealthCheckRequest{})
		took := time.Since(start)
		cancel()
		if pipeline.AsError(err).Kind() != pipeline.KindUnavailable || len(h.at) != 1 {
			t.Errorf("pushback %q: err %v after %d attempts, want the server's UNAVAILABLE after 1", tt.pushback, err, len(h.at))
		}
		if took != 0 {
			t.Errorf("pushback %q: the call took %v, want it to end at once", tt.pushback, took)
		}
	}
}
