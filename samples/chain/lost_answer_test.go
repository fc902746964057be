package main

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/sundial-go/sundial/adapters/grpcadapter"
	"github.com/sundial-go/sundial/kernel/propagation"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience/outbound"
)

// loseFirstAnswer is a client interceptor, inside Sundial's, that lets
// the first call reach the server and then drops its answer, as a
// connection reset after the server has acted would.
func loseFirstAnswer() grpc.UnaryClientInterceptor {
	var lost atomic.Bool
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if err == nil && lost.CompareAndSwap(false, true) {
			return status.Error(codes.Internal, "connection reset by peer after the request was sent")
		}
		return err
	}
}

// TestExperiment8LostAnswerRetriedByTheDependency: Billing charges, and
// the answer is lost on the way back. A dependency retries the ambiguous
// failure only because the call carries an idempotency key; the retry
// has the same key, so Billing's idempotency record replays the receipt:
// one charge, counted in Billing's journal. The key is the caller's, or
// one the dependency makes (CreateKey). Without a key the dependency does
// not retry, and the caller gets the failure, not a second charge.
func TestExperiment8LostAnswerRetriedByTheDependency(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ callerKey, createKey bool }{{true, false}, {false, true}, {false, false}} {
		keyed := tc.callerKey || tc.createKey
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		billing, srv, err := startBilling(ln, BillingConfig{}, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		stopOnCleanup(t, srv)
		client, err := dialBilling(ln.Addr().String(), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer client.Close()
		cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithChainUnaryInterceptor(grpcadapter.UnaryClientInterceptor(0), loseFirstAnswer()))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		p := outbound.DefaultPolicy()
		p.BackoffBase, p.BackoffMax = time.Millisecond, 2*time.Millisecond
		p.CreateKey = tc.createKey
		dep, err := outbound.New("billing", p)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		if tc.callerKey {
			ctx, _ = propagation.WithIdempotencyKey(ctx, "order-77")
		}
		var r Receipt
		err = client.a.Call(ctx, cc, "billing.charge", Charge{OrderID: "order-77", Amount: 30}, &r, grpcadapter.WithCallDependency(dep))
		cancel()
		charged := billing.Journal().Count("charged")
		st := dep.Stats()
		switch {
		case keyed && (err != nil || r.ID != "chg-1" || charged != 1 || st.Attempts != 2):
			t.Errorf("%+v: receipt %+v, err %v, %d charges, %d attempts; want chg-1, one charge, 2 attempts",
				tc, r, err, charged, st.Attempts)
		case !keyed && (pipeline.AsError(err).Kind() != pipeline.KindUnexpected || charged != 1 || st.Attempts != 1):
			t.Errorf("without a key: err %v, %d charges, %d attempts; want the lost answer's UNEXPECTED, one charge, 1 attempt",
				err, charged, st.Attempts)
		}
		t.Logf("%+v: %d attempts, %d charges, receipt %q, err %v", tc, st.Attempts, charged, r.ID, err)
	}
}
