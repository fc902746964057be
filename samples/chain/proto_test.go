package main

import (
	"log/slog"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sundial-go/sundial/adapters/grpcadapter/prototest"
)

// TestProtocAndBufAcceptTheSchema exports, through server reflection over
// a real loopback listener, the gRPC schema of every role of the chain —
// Billing as the cluster serves it, and Inventory, Orders and Gateway
// served over gRPC the same way (serveGRPC) — prints it as .proto source
// as grpcurl does, compiles it with protoc and lints it with buf
// (docs/grpc.md, "Schemas other tools accept").
func TestProtocAndBufAcceptTheSchema(t *testing.T) {
	services := map[string]registrar{
		"billing":   NewBilling(BillingConfig{}, newJournal("billing", nil)),
		"inventory": NewInventory(InventoryConfig{}, newJournal("inventory", nil)),
		"orders":    NewOrders(OrdersConfig{}, newJournal("orders", nil), nil, nil),
		"gateway":   NewGateway(GatewayConfig{}, newJournal("gateway", nil), nil, nil),
	}
	for name, svc := range services {
		t.Run(name, func(t *testing.T) {
			logger := slog.New(slog.DiscardHandler)
			k, err := newKernel(svc, "", logger)
			if err != nil {
				t.Fatal(err)
			}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			srv, err := serveGRPC(name, ln, k, logger)
			if err != nil {
				t.Fatal(err)
			}
			stopOnCleanup(t, srv)
			conn, err := grpc.NewClient(srv.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			prototest.Check(t, conn)
		})
	}
}
