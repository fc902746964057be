package propagation

import (
	"cmp"
	"context"
	"log/slog"
	"net/http"
	"slices"
	"strings"

	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/propagation"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience/idempotency"
)

// The baggage keys Sundial reads and writes.
const (
	// BaggageIdempotencyKey carries a caller's idempotency key.
	BaggageIdempotencyKey = "sundial.idempotency-key"
	// BaggagePriority carries a call's class to the services it calls.
	// Like the Sundial-Priority header, it only lowers a class.
	BaggagePriority = "sundial.priority"
	// BaggageRetried marks a call that a tier above retries. A Sundial
	// client that sees it makes one attempt and passes the mark on.
	BaggageRetried = "sundial.retried"
)

// propagator carries the W3C trace context (traceparent, tracestate) and
// W3C baggage. It is fixed, not otel's global propagator: Sundial services
// always speak W3C to each other.
var propagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// Propagator returns the W3C propagator (trace context and baggage) that
// the Extract and Inject functions use. Pass it to APIs that take a
// propagation.TextMapPropagator.
func Propagator() propagation.TextMapPropagator { return propagator }

// ExtractHTTP returns ctx carrying the remote span context and the baggage
// of the request headers h (traceparent, tracestate, baggage). The span
// [Op.Start] starts under that context continues the caller's trace.
// Malformed headers are ignored. Baggage beyond the W3C limits (64
// members, 8192 bytes) is cut by otel's parser.
func ExtractHTTP(ctx context.Context, h http.Header) context.Context {
	return propagator.Extract(ctx, propagation.HeaderCarrier(h))
}

// InjectHTTP writes the span context and baggage of ctx into the outgoing
// request headers h. It writes nothing when ctx carries neither.
func InjectHTTP(ctx context.Context, h http.Header) {
	propagator.Inject(ctx, propagation.HeaderCarrier(h))
}

// ExtractGRPC is ExtractHTTP for gRPC metadata. md is the incoming
// metadata, whose keys are lower case. A google.golang.org/grpc/metadata.MD
// may be passed as it is.
func ExtractGRPC(ctx context.Context, md map[string][]string) context.Context {
	return propagator.Extract(ctx, mdCarrier(md))
}

// InjectGRPC is InjectHTTP for gRPC metadata. It sets traceparent,
// tracestate and baggage in md, which must not be nil. Copy the outgoing
// metadata before changing it.
func InjectGRPC(ctx context.Context, md map[string][]string) {
	propagator.Inject(ctx, mdCarrier(md))
}

// mdCarrier adapts gRPC metadata (lower-case keys) to a TextMapCarrier.
type mdCarrier map[string][]string

func (c mdCarrier) Get(key string) string {
	if v := c[strings.ToLower(key)]; len(v) > 0 {
		return v[0]
	}
	return ""
}

func (c mdCarrier) Values(key string) []string { return c[strings.ToLower(key)] }

func (c mdCarrier) Set(key, value string) { c[strings.ToLower(key)] = []string{value} }

func (c mdCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// Bounds on the baggage [Baggage] copies from a context. They are
// tighter than W3C's (64 members, 8192 bytes) because every member is kept
// for the whole call and may be logged.
const (
	// maxBaggageMembers is the most members copied.
	maxBaggageMembers = 32
	// maxBaggageBytes is the most bytes of keys and values copied, summed
	// over the members.
	maxBaggageBytes = 4096
)

// Baggage returns the W3C baggage of ctx as a map, bounded, for the
// invocation's [pipeline.Spec.Baggage]. ExtractHTTP and ExtractGRPC put it
// there. The idempotency key is among it ([BaggageIdempotencyKey]); the
// kernel's edge reads it from there. Baggage returns nil when ctx carries
// no baggage.
//
// At most 32 members and 4096 bytes of keys and values are copied. The
// idempotency key comes first, then the other members in key order.
// Members that do not fit are dropped; the rest are still copied. One
// Warn line on logger names how many and which (nil: nothing is logged).
func Baggage(ctx context.Context, logger *slog.Logger) map[string]string {
	members := baggage.FromContext(ctx).Members()
	if len(members) == 0 {
		return nil
	}
	slices.SortFunc(members, func(a, b baggage.Member) int {
		ai, bi := a.Key() == BaggageIdempotencyKey, b.Key() == BaggageIdempotencyKey
		switch {
		case ai && !bi:
			return -1
		case bi && !ai:
			return 1
		}
		return cmp.Compare(a.Key(), b.Key())
	})
	out := make(map[string]string, min(len(members), maxBaggageMembers))
	var dropped []string
	size := 0
	for _, m := range members {
		sz := len(m.Key()) + len(m.Value())
		if len(out) >= maxBaggageMembers || size+sz > maxBaggageBytes {
			dropped = append(dropped, m.Key())
			continue
		}
		out[m.Key()] = m.Value()
		size += sz
	}
	if len(dropped) > 0 && logger != nil {
		shown := dropped
		if len(shown) > 8 {
			shown = shown[:8]
		}
		logger.LogAttrs(ctx, slog.LevelWarn, "sundial: baggage over the limit; members dropped",
			slog.Int("dropped", len(dropped)),
			slog.String("keys", strings.Join(shown, ",")),
			slog.Int("max_members", maxBaggageMembers),
			slog.Int("max_bytes", maxBaggageBytes))
	}
	return out
}

// IdempotencyKey returns the caller's idempotency key as a handler sees it
// from its context. It is the W3C baggage member sundial.idempotency-key,
// or "". The kernel puts the invocation's key into the baggage of the
// handler's context, whatever header it came from. So a typed handler
// reads it here:
//
//	if key := propagation.IdempotencyKey(ctx); key != "" {
//		if o, ok := s.byKey[key]; ok {
//			return o, nil // a retry of a call that already succeeded
//		}
//	}
func IdempotencyKey(ctx context.Context) string {
	return baggage.FromContext(ctx).Member(BaggageIdempotencyKey).Value()
}

// WithIdempotencyKey returns ctx with key as its idempotency key. The key
// is the W3C baggage member sundial.idempotency-key. The outbound HTTP
// transport and gRPC client interceptor send it on every call made with
// the returned context. A Sundial service takes it as the call's key when
// no header sent one. A client retries a call with the same key: after a
// 504, or a 409 whose first attempt still runs.
//
// It returns ctx unchanged and false when key is not a valid idempotency
// key (1 to 255 printable ASCII characters).
func WithIdempotencyKey(ctx context.Context, key string) (context.Context, bool) {
	if !idempotency.ValidKey(key) {
		return ctx, false
	}
	m, err := baggage.NewMemberRaw(BaggageIdempotencyKey, key)
	if err != nil {
		return ctx, false
	}
	b, err := baggage.FromContext(ctx).SetMember(m)
	if err != nil {
		return ctx, false
	}
	return baggage.ContextWithBaggage(ctx, b), true
}

// WithPriority returns ctx with p as the class of the calls made with it.
// The class is the W3C baggage member sundial.priority. The outbound HTTP
// transport and gRPC client interceptor send it on every call made with
// the returned context. A Sundial service takes it as the caller's class.
// It can only lower the class of the operation it reaches. Mark a prefetch
// or a batch job pipeline.PrioritySheddable. The kernel marks the
// handler's context so when the caller lowered its call's class.
func WithPriority(ctx context.Context, p pipeline.Priority) context.Context {
	m, err := baggage.NewMemberRaw(BaggagePriority, p.String())
	if err != nil {
		return ctx
	}
	b, err := baggage.FromContext(ctx).SetMember(m)
	if err != nil {
		return ctx
	}
	return baggage.ContextWithBaggage(ctx, b)
}
