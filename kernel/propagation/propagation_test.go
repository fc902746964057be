package propagation_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/trace"

	"github.com/sundial-go/sundial/kernel/propagation"
	"github.com/sundial-go/sundial/pipeline"
)

// remoteContext returns a context carrying a sampled span context and the
// baggage members given as "k=v" pairs.
func remoteContext(t *testing.T, members ...string) context.Context {
	t.Helper()
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled,
	}))
	if len(members) > 0 {
		b, err := baggage.Parse(strings.Join(members, ","))
		if err != nil {
			t.Fatalf("baggage.Parse: %v", err)
		}
		ctx = baggage.ContextWithBaggage(ctx, b)
	}
	return ctx
}

// TestPropagationRoundTrip: what InjectX writes, ExtractX reads back — for
// HTTP headers and gRPC metadata.
func TestPropagationRoundTrip(t *testing.T) {
	tests := []struct {
		name    string
		inject  func(context.Context) any
		extract func(any) context.Context
		header  func(any) string
	}{
		{
			name:    "http",
			inject:  func(ctx context.Context) any { h := http.Header{}; propagation.InjectHTTP(ctx, h); return h },
			extract: func(c any) context.Context { return propagation.ExtractHTTP(context.Background(), c.(http.Header)) },
			header:  func(c any) string { return c.(http.Header).Get("Traceparent") },
		},
		{
			name: "grpc",
			inject: func(ctx context.Context) any {
				md := map[string][]string{}
				propagation.InjectGRPC(ctx, md)
				return md
			},
			extract: func(c any) context.Context {
				return propagation.ExtractGRPC(context.Background(), c.(map[string][]string))
			},
			header: func(c any) string { return strings.Join(c.(map[string][]string)["traceparent"], ",") },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := remoteContext(t, "sundial.idempotency-key=abc-123", "tenant=acme")
			carrier := tt.inject(ctx)
			if got, want := tt.header(carrier), "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"; got != want {
				t.Errorf("traceparent = %q, want %q", got, want)
			}
			back := tt.extract(carrier)
			sc := trace.SpanContextFromContext(back)
			if sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || sc.SpanID().String() != "00f067aa0ba902b7" || !sc.IsRemote() || !sc.IsSampled() {
				t.Errorf("extracted span context = %+v, want the injected one, remote and sampled", sc)
			}
			bag := baggage.FromContext(back)
			if bag.Member("sundial.idempotency-key").Value() != "abc-123" || bag.Member("tenant").Value() != "acme" {
				t.Errorf("extracted baggage = %q, want the injected members", bag.String())
			}
		})
	}
}

// TestExtractIgnoresMalformed: a malformed traceparent starts no remote
// trace, and nothing panics.
func TestExtractIgnoresMalformed(t *testing.T) {
	for _, tp := range []string{"", "garbage", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"} {
		ctx := propagation.ExtractHTTP(context.Background(), http.Header{"Traceparent": {tp}, "Baggage": {"%%%"}})
		if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
			t.Errorf("ExtractHTTP(traceparent %q) = valid span context %v, want none", tp, sc)
		}
	}
}

// TestBaggage: the extracted baggage reaches the invocation, the
// idempotency key among it.
func TestBaggage(t *testing.T) {
	ctx := propagation.ExtractGRPC(context.Background(), map[string][]string{
		"baggage": {"sundial.idempotency-key=order-42,tenant=acme%20corp"},
	})
	b := propagation.Baggage(ctx, nil)
	if len(b) != 2 {
		t.Errorf("Baggage = %v, want 2 members", b)
	}
	inv := pipeline.NewInvocation(pipeline.Spec{Baggage: b, IdempotencyKey: propagation.IdempotencyKey(ctx)})
	if got := inv.IdempotencyKey(); got != "order-42" {
		t.Errorf("IdempotencyKey() = %q, want order-42", got)
	}
	if v, _ := inv.Baggage("tenant"); v != "acme corp" {
		t.Errorf("Baggage(tenant) = %q, want the decoded \"acme corp\"", v)
	}
	if b := propagation.Baggage(context.Background(), nil); b != nil {
		t.Errorf("Baggage without baggage = %v, want nil", b)
	}
}

// TestBaggageBound: members past MaxBaggageMembers or MaxBaggageBytes
// are dropped with one log line, and the idempotency key is kept first.
func TestBaggageBound(t *testing.T) {
	big := strings.Repeat("x", 1000)
	tests := []struct {
		name        string
		members     []string
		wantKept    int
		wantDropped int
	}{
		{"within", []string{"a=1", "b=2"}, 2 + 1, 0},
		{"too many members", memberList(40, "v"), propagation.MaxBaggageMembers, 40 + 1 - propagation.MaxBaggageMembers},
		// A "big-i" member is 5+1000 bytes of key and value, the key member
		// 23+2: 25 + 4*1005 = 4045 fit in 4096 bytes, a fifth does not.
		{"too many bytes", memberList(5, big), 1 + 4, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			members := append([]string{"sundial.idempotency-key=k1"}, tt.members...)
			ctx := remoteContext(t, members...)
			var log bytes.Buffer
			b := propagation.Baggage(ctx, slog.New(slog.NewTextHandler(&log, nil)))
			if len(b) != tt.wantKept {
				t.Errorf("Baggage kept %d, want %d", len(b), tt.wantKept)
			}
			if b[propagation.BaggageIdempotencyKey] != "k1" {
				t.Errorf("idempotency key = %q, want k1 (it is copied first)", b[propagation.BaggageIdempotencyKey])
			}
			lines := strings.Count(log.String(), "\n")
			if want := min(tt.wantDropped, 1); lines != want || (want == 1 && !strings.Contains(log.String(), fmt.Sprintf("dropped=%d", tt.wantDropped))) {
				t.Errorf("log = %q, want %d line(s) naming %d dropped", log.String(), want, tt.wantDropped)
			}
		})
	}
}

func memberList(n int, value string) []string {
	out := make([]string, n)
	for i := range out {
		if len(value) > 100 {
			out[i] = fmt.Sprintf("big-%d=%s", i, value)
		} else {
			out[i] = fmt.Sprintf("m%02d=%s", i, value)
		}
	}
	return out
}

// TestWithIdempotencyKey: a key set on a context is what IdempotencyKey
// reads, what InjectHTTP sends as baggage, and what the far side's
// extracted context reads back; an invalid key leaves the context as it
// was.
func TestWithIdempotencyKey(t *testing.T) {
	ctx, ok := propagation.WithIdempotencyKey(context.Background(), "checkout 42;=,x")
	if !ok || propagation.IdempotencyKey(ctx) != "checkout 42;=,x" {
		t.Fatalf("WithIdempotencyKey = %q, %v; want the key set", propagation.IdempotencyKey(ctx), ok)
	}
	h := http.Header{}
	propagation.InjectHTTP(ctx, h)
	if h.Get("Baggage") == "" {
		t.Fatal("InjectHTTP wrote no baggage header")
	}
	far := propagation.ExtractHTTP(context.Background(), h)
	if got := propagation.IdempotencyKey(far); got != "checkout 42;=,x" {
		t.Errorf("the far side read key %q from baggage %q, want it unchanged", got, h.Get("Baggage"))
	}
	if got := propagation.Baggage(far, nil)[propagation.BaggageIdempotencyKey]; got != "checkout 42;=,x" {
		t.Errorf("Baggage()[%s] = %q, want the key", propagation.BaggageIdempotencyKey, got)
	}

	ctx2, ok := propagation.WithIdempotencyKey(ctx, "second")
	if !ok || propagation.IdempotencyKey(ctx2) != "second" {
		t.Errorf("replacing the key: got %q, %v", propagation.IdempotencyKey(ctx2), ok)
	}
	for _, bad := range []string{"", "caf\u00e9", "line\nbreak", strings.Repeat("k", 256)} {
		got, ok := propagation.WithIdempotencyKey(ctx, bad)
		if ok || propagation.IdempotencyKey(got) != "checkout 42;=,x" {
			t.Errorf("WithIdempotencyKey(%q) = %q, %v; want refused and the context unchanged", bad, propagation.IdempotencyKey(got), ok)
		}
	}
}
