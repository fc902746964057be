package kernel_test

import (
	"go.opentelemetry.io/otel/baggage"

	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
)

// userKey is the context key under which Authenticate passes the caller's
// user down the chain.
type userKey struct{}

// userFrom returns the user Authenticate put on ctx.
func userFrom(ctx context.Context) (string, bool) {
	u, ok := ctx.Value(userKey{}).(string)
	return u, ok
}

// Authenticate is a middleware for the Authentication stage. It reads a
// bearer token from the caller's baggage member "authorization", turns the
// call away when the token is missing or unknown, and passes the user
// down on the context.
type Authenticate struct {
	Users map[string]string // token -> user
}

func (a Authenticate) Invoke(ctx context.Context, inv *pipeline.Invocation, next pipeline.Handler) (any, error) {
	v, _ := inv.Baggage("authorization")
	token, ok := strings.CutPrefix(v, "Bearer ")
	user, known := a.Users[token]
	if !ok || !known {
		// A rejection: return an outcome without calling next.
		return nil, pipeline.NewError(pipeline.KindUnauthenticated, "SHOP_UNAUTHENTICATED_001", "A valid bearer token is required.")
	}
	// Pass a derived context down: everything inside sees the user.
	return next(context.WithValue(ctx, userKey{}, user), inv)
}

// Audit is a middleware for the Authorization stage: one log record per
// call that got past authentication, with its outcome.
func Audit(logger *slog.Logger) pipeline.Middleware {
	return pipeline.MiddlewareFunc(func(ctx context.Context, inv *pipeline.Invocation, next pipeline.Handler) (any, error) {
		out, err := next(ctx, inv)
		user, _ := userFrom(ctx)
		logger.Info("audit", "operation", inv.OperationID(), "user", user, "outcome", pipelinetest.KindOf(err).String())
		return out, err
	})
}

type GetOrder struct {
	ID string `json:"id"`
}

type Order struct {
	ID    string `json:"id"`
	Owner string `json:"owner"`
}

// Register application middleware at two stages: Authenticate rejects
// calls without a valid token before anything later runs, and passes the
// user to the handler on its context; Audit logs the calls that got past
// it.
func Example_middleware() {
	reg := operations.NewRegistry()
	err := operations.Register(reg, operations.Descriptor{
		ID: "orders.get", Summary: "Get an order.", Method: "GET", Path: "/orders/:id",
	}, func(ctx context.Context, in GetOrder) (Order, error) {
		user, _ := userFrom(ctx)
		return Order{ID: in.ID, Owner: user}, nil
	})
	if err != nil {
		panic(err)
	}
	logs := new(pipelinetest.LogSink)
	k, err := kernel.New(
		kernel.WithRegistry(reg),
		kernel.UseAt(pipeline.StageAuthentication, Authenticate{Users: map[string]string{"t-ada": "ada"}}),
		kernel.UseAt(pipeline.StageAuthorization, Audit(logs.Logger())),
	)
	if err != nil {
		panic(err)
	}
	for _, token := range []string{"Bearer t-ada", "Bearer stolen", ""} {
		// Over HTTP and gRPC the adapters extract the W3C baggage header
		// into the context; in-process, the caller puts it there.
		ctx := context.Background()
		if m, err := baggage.NewMemberRaw("authorization", token); err == nil && token != "" {
			b, _ := baggage.New(m)
			ctx = baggage.ContextWithBaggage(ctx, b)
		}
		o := k.Operations()[0].Invoke(ctx, kernel.Unary{Input: &GetOrder{ID: "ord-1"}})
		fmt.Println(pipelinetest.KindOf(o.Err), pipelinetest.CodeOf(o.Err), o.Output)
	}
	for _, r := range logs.Find(pipelinetest.Message("audit")) {
		fmt.Println("audit:", r.Attrs["operation"], r.Attrs["user"], r.Attrs["outcome"])
	}
	// Output:
	// OK  {ord-1 ada}
	// UNAUTHENTICATED SHOP_UNAUTHENTICATED_001 <nil>
	// UNAUTHENTICATED SHOP_UNAUTHENTICATED_001 <nil>
	// audit: orders.get ada OK
}

// Test a middleware on its own with pipelinetest: build the invocation,
// put a Recorder behind the middleware to see what the rest of the chain
// was given, and read what was logged from a LogSink.
func Example_middlewareTest() {
	auth := Authenticate{Users: map[string]string{"t-ada": "ada"}}
	logs := new(pipelinetest.LogSink)
	rec := new(pipelinetest.Recorder)
	h := pipeline.Chain(pipelinetest.Handler("the order", nil), auth, Audit(logs.Logger()), rec)

	// A valid token: the call goes through, with the user on the context.
	inv := pipelinetest.NewInvocation(pipeline.Spec{
		Operation: pipelinetest.Operation("orders.get"),
		Protocol:  pipeline.ProtocolHTTP,
		Baggage:   map[string]string{"authorization": "Bearer t-ada"},
	})
	out, err := h(context.Background(), inv)
	call, _ := rec.Last()
	user, _ := userFrom(call.Context)
	fmt.Println(out, err, "| the handler saw user", user)

	// No token: rejected, and nothing behind the middleware ran.
	rec.Reset()
	_, err = h(context.Background(), pipelinetest.NewInvocation(pipeline.Spec{Operation: pipelinetest.Operation("orders.get")}))
	_, ran := rec.Last()
	fmt.Println(pipelinetest.CodeOf(err), "| the rest of the chain ran:", ran)

	for _, r := range logs.Find(pipelinetest.Message("audit")) {
		fmt.Println("audit:", r.Attrs["operation"], r.Attrs["user"], r.Attrs["outcome"])
	}
	// Output:
	// the order <nil> | the handler saw user ada
	// SHOP_UNAUTHENTICATED_001 | the rest of the chain ran: false
	// audit: orders.get ada OK
}
