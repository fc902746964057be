package adapters_test

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/baggage"

	"github.com/sundial-go/sundial/adapters/connectadapter"
	"github.com/sundial-go/sundial/adapters/httpadapter"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/kernel/client"
	"github.com/sundial-go/sundial/kernel/propagation"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience/outbound"
)

// greet is the input of the client tests' operations.
type greet struct {
	Name string `json:"name"`
	Qty  int    `json:"qty"`
}

// greeting is their output: what the handler saw of the call.
type greeting struct {
	Text     string `json:"text"`
	Qty      int    `json:"qty"`
	Priority string `json:"priority"`
	Tenant   string `json:"tenant"`
}

// greeter is one service of the client tests: its operations, and what
// its handlers saw.
type greeter struct {
	reg     *operations.Registry
	started chan struct{} // a "slow" call reached its handler

	mu        sync.Mutex
	keys      []string    // the idempotency key of each call of t.greet
	deadlines []time.Time // the deadline of each call of t.greet
	arrivals  []time.Time // when each call of t.greet reached its handler
	fail      int         // calls of t.greet still to fail with UNAVAILABLE
	counted   int         // calls of t.count that ran
}

// newGreeter registers t.greet (POST /greet) and t.limited (POST
// /limited, one call a minute).
func newGreeter(t *testing.T) *greeter {
	t.Helper()
	g := &greeter{reg: operations.NewRegistry(), started: make(chan struct{}, 1)}
	if err := operations.Register(g.reg, operations.Descriptor{ID: "t.greet", Method: "POST", Path: "/greet"}, g.greet); err != nil {
		t.Fatal(err)
	}
	if err := operations.Register(g.reg, operations.Descriptor{ID: "t.limited", Method: "POST", Path: "/limited"},
		func(context.Context, greet) (greeting, error) { return greeting{Text: "ok"}, nil }); err != nil {
		t.Fatal(err)
	}
	if err := operations.Register(g.reg, operations.Descriptor{ID: "t.count", Method: "POST", Path: "/count"},
		func(context.Context, greet) (greeting, error) {
			g.mu.Lock()
			defer g.mu.Unlock()
			g.counted++
			return greeting{Text: "counted", Qty: g.counted}, nil
		}); err != nil {
		t.Fatal(err)
	}
	return g
}

func (g *greeter) greet(ctx context.Context, in greet) (greeting, error) {
	dl, _ := ctx.Deadline()
	g.mu.Lock()
	g.keys = append(g.keys, propagation.IdempotencyKey(ctx))
	g.deadlines = append(g.deadlines, dl)
	g.arrivals = append(g.arrivals, time.Now())
	fail := g.fail > 0
	g.fail--
	g.mu.Unlock()
	bag := baggage.FromContext(ctx)
	switch {
	case fail:
		return greeting{}, pipeline.NewError(pipeline.KindUnavailable, "T_UNAVAILABLE_002", "Not yet.")
	case in.Name == "bad":
		return greeting{}, pipeline.NewError(pipeline.KindValidation, "T_VALIDATION_001", "The name is bad.").
			WithDetail("field", "name").WithDetail("limit", 3)
	case in.Name == "down":
		return greeting{}, pipeline.NewError(pipeline.KindUnavailable, "T_UNAVAILABLE_001", "The shard is down.").
			WithDetail("shard", "eu").WithRetryAfter(1500 * time.Millisecond)
	case in.Name == "slow":
		g.started <- struct{}{}
		<-ctx.Done()
		return greeting{}, ctx.Err()
	}
	return greeting{Text: "hello " + in.Name, Qty: in.Qty,
		Priority: bag.Member(propagation.BaggagePriority).Value(), Tenant: bag.Member("tenant").Value()}, nil
}

// config is the kernel configuration of the client tests.
const clientTestConfig = `{"Sundial":{"Kernel":{"Resilience":{"Operations":{
	"t.limited":{"PermitLimit":1,"WindowSeconds":60},
	"t.count":{"Idempotency":{"Enabled":true}}}}}}}`

// transportNames are the transports every client test runs over.
var transportNames = []string{"in-process", "http", "grpc", "connect"}

// serveOver serves the operations of reg over the transport name until
// the test ends, and returns the client transport of that service.
func serveOver(t *testing.T, name string, reg *operations.Registry) client.Transport {
	t.Helper()
	k, err := kernel.New(kernel.WithRegistry(reg), kernel.WithConfigJSON([]byte(clientTestConfig)))
	if err != nil {
		t.Fatal(err)
	}
	switch name {
	case "http":
		url := serveHTTP(t, k)
		rt := &http.Transport{}
		t.Cleanup(rt.CloseIdleConnections)
		return httpadapter.ClientTransport(reg, url, rt)
	case "grpc":
		ga, cc := serveGRPC(t, k)
		return ga.ClientTransport(cc)
	case "connect":
		url := serveConnect(t, k)
		rt := &http.Transport{}
		t.Cleanup(rt.CloseIdleConnections)
		return connectadapter.ClientTransport(reg, url, &http.Client{Transport: rt}, connectadapter.WithPackage("shop.v1"))
	}
	return client.Local(k)
}

// transports returns, by name, a function that serves a new greeter's
// operations over that transport and returns the greeter and its
// client transport.
func transports() map[string]func(t *testing.T) (*greeter, client.Transport) {
	m := map[string]func(t *testing.T) (*greeter, client.Transport){}
	for _, name := range transportNames {
		m[name] = func(t *testing.T) (*greeter, client.Transport) {
			g := newGreeter(t)
			return g, serveOver(t, name, g.reg)
		}
	}
	return m
}

// want is what a row expects of a call's outcome.
type want struct {
	out        greeting
	kind       pipeline.Kind
	code, msg  string
	prefix     bool // msg is a prefix of the message (it names the retry-after)
	details    map[string]any
	retryAfter time.Duration // exact; -1: any from 1 s to a minute
	is         error         // errors.Is must hold
}

// TestClientOutcomesSameOnEveryTransport runs one table of calls, unchanged,
// over HTTP, gRPC, Connect and in-process: each call returns the same output, or a
// *pipeline.Error with the same kind, code, message, details and
// retry-after, whichever transport carried it.
func TestClientOutcomesSameOnEveryTransport(t *testing.T) {
	rows := []struct {
		name string
		id   string
		in   greet
		opts func(t *testing.T) []client.Option
		call func(t *testing.T, g *greeter, c *client.Client[greet, greeting], in greet) (greeting, error)
		want want
	}{
		{name: "ok", id: "t.greet", in: greet{Name: "ann", Qty: 2},
			want: want{out: greeting{Text: "hello ann", Qty: 2}}},
		{name: "priority and baggage carried", id: "t.greet", in: greet{Name: "bo"},
			call: func(t *testing.T, _ *greeter, c *client.Client[greet, greeting], in greet) (greeting, error) {
				m, _ := baggage.NewMemberRaw("tenant", "acme")
				b, _ := baggage.New(m)
				ctx := propagation.WithPriority(baggage.ContextWithBaggage(t.Context(), b), pipeline.PrioritySheddable)
				return c.Call(ctx, in)
			},
			want: want{out: greeting{Text: "hello bo", Priority: "sheddable", Tenant: "acme"}}},
		{name: "validation", id: "t.greet", in: greet{Name: "bad"},
			want: want{kind: pipeline.KindValidation, code: "T_VALIDATION_001", msg: "The name is bad.",
				details: map[string]any{"field": "name", "limit": 3.0}}},
		{name: "unavailable with retry-after", id: "t.greet", in: greet{Name: "down"},
			want: want{kind: pipeline.KindUnavailable, code: "T_UNAVAILABLE_001", msg: "The shard is down.",
				details: map[string]any{"shard": "eu"}, retryAfter: 2 * time.Second}},
		{name: "rate limited", id: "t.limited", in: greet{Name: "x"},
			call: func(t *testing.T, _ *greeter, c *client.Client[greet, greeting], in greet) (greeting, error) {
				if _, err := c.Call(t.Context(), in); err != nil {
					t.Fatalf("first call: %v", err)
				}
				return c.Call(t.Context(), in)
			},
			want: want{kind: pipeline.KindUnavailable, code: "KERNEL_UNAVAILABLE_002",
				msg: "Operation 't.limited' is rate limited; retry after ", prefix: true,
				details: map[string]any{"id": "t.limited"}, retryAfter: -1}},
		{name: "idempotent replay", id: "t.count", in: greet{Name: "x"},
			call: func(t *testing.T, _ *greeter, c *client.Client[greet, greeting], in greet) (greeting, error) {
				ctx, _ := propagation.WithIdempotencyKey(t.Context(), "order-7")
				if first, err := c.Call(ctx, in); err != nil || first.Qty != 1 {
					t.Fatalf("first call: %+v, %v", first, err)
				}
				return c.Call(ctx, in) // the first call's outcome, replayed: it runs once
			},
			want: want{out: greeting{Text: "counted", Qty: 1}}},
		{name: "breaker open", id: "t.greet", in: greet{Name: "down"},
			opts: func(t *testing.T) []client.Option {
				p := outbound.DefaultPolicy()
				p.Attempts, p.FailureThreshold = 1, 1
				d, err := outbound.New("greeter", p)
				if err != nil {
					t.Fatal(err)
				}
				return []client.Option{client.WithDependency(d)}
			},
			call: func(t *testing.T, _ *greeter, c *client.Client[greet, greeting], in greet) (greeting, error) {
				if _, err := c.Call(t.Context(), in); pipeline.AsError(err).Code() != "T_UNAVAILABLE_001" {
					t.Fatalf("first call: %v, want the server's failure", err)
				}
				return c.Call(t.Context(), in) // refused by the open breaker: nothing sent
			},
			want: want{kind: pipeline.KindUnavailable, code: outbound.CodeDependencyOpen,
				msg:     "The dependency 'greeter' is failing; its circuit breaker is open.",
				details: map[string]any{"dependency": "greeter"}, retryAfter: -1}},
		{name: "timeout", id: "t.greet", in: greet{Name: "slow"},
			call: func(t *testing.T, _ *greeter, c *client.Client[greet, greeting], in greet) (greeting, error) {
				ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
				defer cancel()
				return c.Call(ctx, in)
			},
			want: want{kind: pipeline.KindTimeout, code: pipeline.CodeTimeout, msg: pipeline.ErrTimeout().Message()}},
		{name: "cancelled", id: "t.greet", in: greet{Name: "slow"},
			call: func(t *testing.T, g *greeter, c *client.Client[greet, greeting], in greet) (greeting, error) {
				ctx, cancel := context.WithCancel(t.Context())
				go func() { <-g.started; cancel() }()
				return c.Call(ctx, in)
			},
			want: want{kind: pipeline.KindCanceled, code: pipeline.CodeCanceled, msg: pipeline.ErrCanceled().Message(),
				is: context.Canceled}},
	}
	for name, serve := range transports() {
		t.Run(name, func(t *testing.T) {
			for _, row := range rows {
				t.Run(row.name, func(t *testing.T) {
					g, tr := serve(t)
					var opts []client.Option
					if row.opts != nil {
						opts = row.opts(t)
					}
					c, err := client.New[greet, greeting](tr, row.id, opts...)
					if err != nil {
						t.Fatal(err)
					}
					call := row.call
					if call == nil {
						call = func(t *testing.T, _ *greeter, c *client.Client[greet, greeting], in greet) (greeting, error) {
							return c.Call(t.Context(), in)
						}
					}
					out, err := call(t, g, c, row.in)
					checkOutcome(t, out, err, row.want)
				})
			}
		})
	}
}

// checkOutcome fails t unless out and err are what w expects.
func checkOutcome(t *testing.T, out greeting, err error, w want) {
	t.Helper()
	if w.code == "" {
		if err != nil || out != w.out {
			t.Fatalf("got %+v, %v; want %+v", out, err, w.out)
		}
		return
	}
	var pe *pipeline.Error
	if !errors.As(err, &pe) {
		t.Fatalf("err = %v (%T), want a *pipeline.Error", err, err)
	}
	msgOK := pe.Message() == w.msg || w.prefix && strings.HasPrefix(pe.Message(), w.msg)
	if pe.Kind() != w.kind || pe.Code() != w.code || !msgOK {
		t.Errorf("outcome %s %s %q, want %s %s %q", pe.Kind(), pe.Code(), pe.Message(), w.kind, w.code, w.msg)
	}
	if got := pe.Details(); !maps.EqualFunc(got, w.details, func(a, b any) bool { return reflect.DeepEqual(a, b) }) {
		t.Errorf("details %#v, want %#v", got, w.details)
	}
	ra, has := pe.RetryAfter()
	switch {
	case w.retryAfter < 0 && (!has || ra < time.Second || ra > time.Minute):
		t.Errorf("retry-after %v (%v), want 1 s to 1 min", ra, has)
	case w.retryAfter >= 0 && (ra != w.retryAfter || has != (w.retryAfter > 0)):
		t.Errorf("retry-after %v (%v), want %v", ra, has, w.retryAfter)
	}
	if w.is != nil && !errors.Is(err, w.is) {
		t.Errorf("errors.Is(%v, %v) = false", err, w.is)
	}
	if out != (greeting{}) {
		t.Errorf("output %+v with a failure", out)
	}
}

// TestClientReusesTheKeyOnRetries: a server fails the first attempt with
// UNAVAILABLE; the client's dependency retries, and both attempts carry
// the one idempotency key made for the call (CreateKey).
func TestClientReusesTheKeyOnRetries(t *testing.T) {
	for name, serve := range transports() {
		t.Run(name, func(t *testing.T) {
			g, tr := serve(t)
			g.fail = 1
			c, err := client.New[greet, greeting](tr, "t.greet", client.WithDependency(testDependency(t, true)))
			if err != nil {
				t.Fatal(err)
			}
			if out, err := c.Call(t.Context(), greet{Name: "ann"}); err != nil || out.Text != "hello ann" {
				t.Fatalf("got %+v, %v", out, err)
			}
			if len(g.keys) != 2 || g.keys[0] == "" || g.keys[0] != g.keys[1] {
				t.Fatalf("keys of the attempts %q, want two of one key", g.keys)
			}
			// A second call is a new logical call: a new key.
			if _, err := c.Call(t.Context(), greet{Name: "ann"}); err != nil || len(g.keys) != 3 || g.keys[2] == g.keys[0] {
				t.Fatalf("second call: %v, keys %q: want a new key", err, g.keys)
			}
		})
	}
}

// testDependency returns a dependency of three attempts, 1 to 2 ms apart,
// without a breaker; createKey sets CreateKey.
func testDependency(t *testing.T, createKey bool) *outbound.Dependency {
	t.Helper()
	p := outbound.DefaultPolicy()
	p.BackoffBase, p.BackoffMax = time.Millisecond, 2*time.Millisecond
	p.FailureThreshold = 0
	p.CreateKey = createKey
	d, err := outbound.New("greeter", p)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestClientCarriesTheDeadline: the handler's deadline is the caller's
// less the client's margin. Over HTTP the absolute header carries it to
// the millisecond; gRPC and Connect carry what remains, so the server's
// deadline is later by at most the time the call took to arrive.
func TestClientCarriesTheDeadline(t *testing.T) {
	const margin = 300 * time.Millisecond
	for name, serve := range transports() {
		t.Run(name, func(t *testing.T) {
			g, tr := serve(t)
			c, err := client.New[greet, greeting](tr, "t.greet", client.WithMargin(margin))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			dl, _ := ctx.Deadline()
			sent := time.Now()
			if _, err := c.Call(ctx, greet{Name: "ann"}); err != nil {
				t.Fatal(err)
			}
			want := dl.Add(-margin)
			got := g.deadlines[0]
			late := time.Duration(0)
			if name == "grpc" || name == "connect" {
				late = g.arrivals[0].Sub(sent)
			}
			if got.After(want.Add(late)) || got.Before(want.Add(-time.Millisecond)) {
				t.Errorf("the handler's deadline is %v from the caller's, want -%v (up to %v later)",
					got.Sub(dl), margin, late)
			}
		})
	}
}

// TestClientOneTierRetries: a top client retries calls of a middle tier,
// whose handler calls a leaf that always fails through a client that
// retries too. The top's attempts carry the retry mark, so the middle
// tier makes one attempt per call: the leaf gets one call per top
// attempt (3), not 3 × 3. Unmarked, the middle tier retries (3 per call).
func TestClientOneTierRetries(t *testing.T) {
	for _, name := range transportNames {
		t.Run(name, func(t *testing.T) {
			leaf := newGreeter(t)
			leaf.fail = 1 << 30
			leafTr := serveOver(t, name, leaf.reg)
			toLeaf, err := client.New[greet, greeting](leafTr, "t.greet", client.WithDependency(testDependency(t, true)))
			if err != nil {
				t.Fatal(err)
			}
			mid := operations.NewRegistry()
			if err := operations.Register(mid, operations.Descriptor{ID: "mid.relay", Method: "POST", Path: "/relay"},
				toLeaf.Call); err != nil {
				t.Fatal(err)
			}
			midTr := serveOver(t, name, mid)
			for _, tc := range []struct {
				top       *outbound.Dependency
				leafCalls int
			}{{nil, 3}, {testDependency(t, true), 3}} {
				leaf.mu.Lock()
				leaf.keys = nil
				leaf.mu.Unlock()
				var opts []client.Option
				if tc.top != nil {
					opts = append(opts, client.WithDependency(tc.top))
				}
				top, err := client.New[greet, greeting](midTr, "mid.relay", opts...)
				if err != nil {
					t.Fatal(err)
				}
				_, err = top.Call(t.Context(), greet{Name: "ann"})
				if pipeline.AsError(err).Code() != "T_UNAVAILABLE_002" {
					t.Fatalf("err %v, want the leaf's T_UNAVAILABLE_002", err)
				}
				leaf.mu.Lock()
				got := len(leaf.keys)
				leaf.mu.Unlock()
				topAttempts := int64(1)
				if tc.top != nil {
					topAttempts = tc.top.Stats().Attempts
				}
				if got != tc.leafCalls || topAttempts != 3 && tc.top != nil {
					t.Errorf("top retries %v: the top made %d attempts and the leaf got %d calls, want %d",
						tc.top != nil, topAttempts, got, tc.leafCalls)
				}
			}
		})
	}
}
