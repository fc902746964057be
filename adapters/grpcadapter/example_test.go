package grpcadapter_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sundial-go/sundial/adapters/grpcadapter"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience"
)

type CreateOrder struct {
	Name   string `json:"name"`
	Amount int    `json:"amount"`
}

type Order struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	Amount int    `json:"amount"`
}

// ExampleNew serves two operations, one named by convention and one by
// override, on an application's *grpc.Server, with server reflection.
func ExampleNew() {
	reg := operations.NewRegistry()
	create := func(_ context.Context, in CreateOrder) (Order, error) {
		return Order{ID: "ord-1", Name: in.Name, Amount: in.Amount}, nil
	}
	cancel := func(_ context.Context, in struct{ ID string }) (struct{}, error) { return struct{}{}, nil }
	if err := operations.Register(reg, operations.Descriptor{ID: "orders.create"}, create); err != nil {
		log.Fatal(err)
	}
	if err := operations.Register(reg, operations.Descriptor{ID: "orders.cancel", GRPCMethod: "Void"}, cancel); err != nil {
		log.Fatal(err)
	}
	k, err := kernel.New(kernel.WithRegistry(reg))
	if err != nil {
		log.Fatal(err)
	}
	a, err := grpcadapter.New(k, grpcadapter.WithPackage("shop.v1"))
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer(append(grpcadapter.DefaultBounds().ServerOptions(), // the listener's bounds
		grpc.ChainUnaryInterceptor(a.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(a.StreamServerInterceptor()),
	)...)
	a.Register(srv)
	a.RegisterReflection(srv)
	// srv.Serve(listener) ...

	for _, m := range a.Methods() {
		fmt.Println(m.FullName, m.OperationID, m.Input.FullName(), "->", m.Output.FullName())
	}
	// Output:
	// /shop.v1.Orders/Create orders.create shop.v1.CreateRequest -> shop.v1.CreateResponse
	// /shop.v1.Orders/Void orders.cancel shop.v1.VoidRequest -> google.protobuf.Empty
}

// ExampleStatus shows the status of a rate-limited call: the outcome's
// code is the ErrorInfo reason, and its retry-after the RetryInfo delay.
func ExampleStatus() {
	outcome := pipeline.NewError(pipeline.KindUnavailable, resilience.CodeRateLimited, "Too many calls of 'orders.create'.").
		WithDetail("id", "orders.create").WithRetryAfter(42 * time.Second)
	st := grpcadapter.Status(outcome, "")
	fmt.Println(st.Code(), st.Message())
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			fmt.Println("reason:", d.GetReason(), "domain:", d.GetDomain(), "id:", d.GetMetadata()["id"])
		case *errdetails.RetryInfo:
			fmt.Println("retry after:", d.GetRetryDelay().AsDuration())
		}
	}
	// Output:
	// Unavailable Too many calls of 'orders.create'.
	// reason: KERNEL_UNAVAILABLE_002 domain: sundial id: orders.create
	// retry after: 42s
}

// ExampleUnaryClientInterceptor caps every outbound call at 2 s, or less
// when the caller's deadline is nearer, and one call at 300 ms.
func ExampleUnaryClientInterceptor() {
	conn, err := grpc.NewClient("billing.internal:5001",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(grpcadapter.UnaryClientInterceptor(2*time.Second)),
		grpc.WithChainStreamInterceptor(grpcadapter.StreamClientInterceptor(2*time.Second)),
	)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	// In a handler: ctx is the invocation's context, so the call never
	// outlives the invocation; a timeout comes back as a TIMEOUT outcome.
	_ = func(ctx context.Context, req, reply any) error {
		return conn.Invoke(ctx, "/billing.v1.Billing/Charge", req, reply, grpcadapter.WithCallTimeout(300*time.Millisecond))
	}
}
