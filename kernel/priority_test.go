package kernel_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/baggage"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/kernel/propagation"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
)

// priorityConfig configures one operation of each class.
const priorityConfig = `{"Sundial": {"Kernel": {"Resilience": {"Operations": {
	"shop.checkout": {"Priority": "critical"},
	"shop.prefetch": {"Priority": "sheddable"}}}}}}`

// seen is what a middleware saw of one call: its class, and the class
// the handler's context carries to the services it calls.
type seen struct {
	ran      bool
	priority pipeline.Priority
	carried  string
}

// priorityKernel returns a kernel with shop.checkout (critical),
// shop.browse (default) and shop.prefetch (sheddable), recording what each
// call saw in *got.
func priorityKernel(t *testing.T, got *seen, opts ...kernel.Option) *kernel.Kernel {
	t.Helper()
	reg := operations.NewRegistry()
	for _, id := range []string{"shop.checkout", "shop.browse", "shop.prefetch"} {
		if err := operations.Register(reg, operations.Descriptor{ID: id},
			func(context.Context, struct{}) (struct{}, error) { return struct{}{}, nil }); err != nil {
			t.Fatal(err)
		}
	}
	record := pipeline.MiddlewareFunc(func(ctx context.Context, inv *pipeline.Invocation, next pipeline.Handler) (any, error) {
		*got = seen{ran: true, priority: inv.Priority(), carried: baggage.FromContext(ctx).Member(propagation.BaggagePriority).Value()}
		return next(ctx, inv)
	})
	k, err := kernel.New(append([]kernel.Option{kernel.WithRegistry(reg), kernel.WithConfigJSON([]byte(priorityConfig)),
		kernel.UseAt(pipeline.StageHandle, record)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { k.Close() })
	return k
}

// withMember returns a context whose baggage has the member
// sundial.priority = v, as a caller's header would bring it.
func withMember(t *testing.T, v string) context.Context {
	t.Helper()
	m, err := baggage.NewMemberRaw(propagation.BaggagePriority, v)
	if err != nil {
		t.Fatal(err)
	}
	b, err := baggage.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return baggage.ContextWithBaggage(context.Background(), b)
}

// TestPriorityLoweredNeverRaised: a call's class is its operation's,
// lowered by the caller's header or baggage, never raised; a lowered call
// (and one of a sheddable operation) carries its class to the services
// it calls; a header naming no class is a 400 KERNEL_VALIDATION_009 and
// nothing runs; a baggage member naming none is ignored.
func TestPriorityLoweredNeverRaised(t *testing.T) {
	t.Parallel()
	const none = "\x00" // no baggage member
	for _, tt := range []struct {
		name, op, header, member string
		want                     pipeline.Priority
		carried                  string
		reject                   bool
	}{
		{"critical op, no header", "shop.checkout", "", none, pipeline.PriorityCritical, "", false},
		{"critical op lowered to sheddable", "shop.checkout", "sheddable", none, pipeline.PrioritySheddable, "sheddable", false},
		{"critical op lowered to default", "shop.checkout", "default", none, pipeline.PriorityDefault, "default", false},
		{"header in another case", "shop.checkout", "SHEDDABLE", none, pipeline.PrioritySheddable, "sheddable", false},
		{"raise refused by header", "shop.browse", "critical", none, pipeline.PriorityDefault, "", false},
		{"raise refused on a sheddable op", "shop.prefetch", "critical", none, pipeline.PrioritySheddable, "sheddable", false},
		{"sheddable op carries its class", "shop.prefetch", "", none, pipeline.PrioritySheddable, "sheddable", false},
		{"baggage lowers", "shop.checkout", "", "sheddable", pipeline.PrioritySheddable, "sheddable", false},
		{"raise refused by baggage", "shop.browse", "", "critical", pipeline.PriorityDefault, "critical", false},
		{"header lower than baggage", "shop.checkout", "sheddable", "default", pipeline.PrioritySheddable, "sheddable", false},
		{"baggage lower than header", "shop.checkout", "default", "sheddable", pipeline.PrioritySheddable, "sheddable", false},
		{"malformed baggage ignored", "shop.checkout", "", "urgent", pipeline.PriorityCritical, "urgent", false},
		{"malformed header", "shop.checkout", "urgent", none, 0, "", true},
		{"repeated header", "shop.checkout", "sheddable, critical", none, 0, "", true},
		{"padded header", "shop.browse", " sheddable", none, 0, "", true},
		{"huge header", "shop.browse", strings.Repeat("x", 1<<20), none, 0, "", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var got seen
			k := priorityKernel(t, &got)
			ctx := context.Background()
			if tt.member != none {
				ctx = withMember(t, tt.member)
			}
			out := k.Op(tt.op).Invoke(ctx, kernel.Unary{Caller: kernel.Caller{Priority: tt.header}})
			if tt.reject {
				e := pipeline.AsError(out.Err)
				if e.Kind() != pipeline.KindValidation || e.Code() != "KERNEL_VALIDATION_009" || got.ran {
					t.Fatalf("Invoke = %v (ran %v), want VALIDATION %s and nothing run", out.Err, got.ran, "KERNEL_VALIDATION_009")
				}
				if len(e.Message()) > 200 {
					t.Errorf("message of %d bytes echoes the header", len(e.Message()))
				}
				return
			}
			if out.Err != nil || got.priority != tt.want || out.Invocation.Priority() != tt.want {
				t.Fatalf("Invoke = %v, class %v (invocation %v); want success, %v", out.Err, got.priority, out.Invocation.Priority(), tt.want)
			}
			if got.carried != tt.carried {
				t.Errorf("handler's baggage sundial.priority = %q, want %q", got.carried, tt.carried)
			}
		})
	}
}

// TestPriorityReloaded: a reload changes an operation's class for the
// calls that arrive after it.
func TestPriorityReloaded(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "sundial.json")
	if err := os.WriteFile(path, []byte(priorityConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	var got seen
	k := priorityKernel(t, &got, kernel.WithConfigFile(path))
	if k.Op("shop.browse").Invoke(context.Background(), kernel.Unary{}); got.priority != pipeline.PriorityDefault {
		t.Fatalf("class before the reload = %v, want default", got.priority)
	}
	doc := strings.Replace(priorityConfig, `"shop.prefetch"`, `"shop.browse": {"Priority": "critical"}, "shop.prefetch"`, 1)
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Reload(); err != nil {
		t.Fatal(err)
	}
	if k.Op("shop.browse").Invoke(context.Background(), kernel.Unary{Caller: kernel.Caller{Priority: "critical"}}); got.priority != pipeline.PriorityCritical {
		t.Errorf("class after the reload = %v, want critical", got.priority)
	}
}

// TestWithPriority: propagation.WithPriority marks a context's calls with
// the class, which a Sundial service takes as the caller's.
func TestWithPriority(t *testing.T) {
	t.Parallel()
	var got seen
	k := priorityKernel(t, &got)
	ctx := propagation.WithPriority(context.Background(), pipeline.PrioritySheddable)
	if out := k.Op("shop.checkout").Invoke(ctx, kernel.Unary{}); out.Err != nil || got.priority != pipeline.PrioritySheddable {
		t.Errorf("Invoke under WithPriority(sheddable) = %v, class %v; want success, sheddable", out.Err, got.priority)
	}
}
