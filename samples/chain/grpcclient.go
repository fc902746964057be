package main

import (
	"context"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sundial-go/sundial/adapters/grpcadapter"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/kernel/client"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/resilience/outbound"
)

// BillingClient calls Billing's operations.
type BillingClient interface {
	Charge(ctx context.Context, in Charge) (Receipt, error)
	Slow(ctx context.Context, in Slow) (SlowDone, error)
}

// billingCallCap is the per-call timeout of the Billing client: a ceiling
// that the context's remaining time can only lower.
const billingCallCap = 5 * time.Second

// grpcBilling is the gRPC client of Billing. It calls the operations with
// their Go types through typed clients over an adapter built from
// Billing's registrations (the handlers never run on this side); grpc-go
// sends what remains of each call's context as grpc-timeout.
type grpcBilling struct {
	a      *grpcadapter.Adapter
	cc     *grpc.ClientConn
	charge *client.Client[Charge, Receipt]
	slow   *client.Client[Slow, SlowDone]
}

// dialBilling returns a Billing client for target ("127.0.0.1:7003"),
// connected with dial when it is set, else over TCP. The connection is
// made lazily, on the first call.
func dialBilling(target string, dial dialFunc) (*grpcBilling, error) {
	reg := operations.NewRegistry()
	if err := NewBilling(BillingConfig{}, newJournal("billing", nil)).Register(reg); err != nil {
		return nil, err
	}
	k, err := kernel.New(kernel.WithRegistry(reg))
	if err != nil {
		return nil, err
	}
	a, err := grpcadapter.New(k, grpcadapter.WithPackage(ProtoPackage))
	if err != nil {
		return nil, err
	}
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(grpcadapter.UnaryClientInterceptor(billingCallCap)),
	}
	if dial != nil {
		// The address as it is: no DNS on a network of another kind.
		target = "passthrough:///" + target
		opts = append(opts, grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return dial(ctx, "tcp", addr)
		}))
	}
	cc, err := grpc.NewClient(target, opts...)
	if err != nil {
		return nil, err
	}
	b := &grpcBilling{a: a, cc: cc}
	if err := b.under(nil); err != nil {
		cc.Close()
		return nil, err
	}
	return b, nil
}

// under makes b's calls run under dep (nil: no outbound policy).
func (b *grpcBilling) under(dep *outbound.Dependency) error {
	var err error
	t := b.a.ClientTransport(b.cc)
	b.charge = bind[Charge, Receipt](t, "billing.charge", dep, &err)
	b.slow = bind[Slow, SlowDone](t, "billing.slow", dep, &err)
	return err
}

// Charge calls billing.charge.
func (b *grpcBilling) Charge(ctx context.Context, in Charge) (Receipt, error) {
	return b.charge.Call(ctx, in)
}

// Slow calls billing.slow.
func (b *grpcBilling) Slow(ctx context.Context, in Slow) (SlowDone, error) {
	return b.slow.Call(ctx, in)
}

// Close closes the connection.
func (b *grpcBilling) Close() error { return b.cc.Close() }
