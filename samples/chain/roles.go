package main

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"

	"github.com/sundial-go/sundial/adapters/httpadapter"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/pipeline"
)

// Roles, in the order a cluster starts them (dependencies first).
var roles = []string{"inventory", "billing", "orders", "gateway"}

// startInventory serves the Inventory role on ln.
func startInventory(ln net.Listener, cfg InventoryConfig, configFile string, logger *slog.Logger) (*Inventory, *server, error) {
	svc := NewInventory(cfg, newJournal("inventory", logger))
	k, err := newKernel(svc, configFile, logger)
	if err != nil {
		return nil, nil, err
	}
	srv, err := serveHTTP("inventory", ln, k, logger, svc.Routes)
	return svc, srv, err
}

// startBilling serves the Billing role (gRPC) on ln.
func startBilling(ln net.Listener, cfg BillingConfig, configFile string, logger *slog.Logger) (*Billing, *server, error) {
	svc := NewBilling(cfg, newJournal("billing", logger))
	k, err := newKernel(svc, configFile, logger)
	if err != nil {
		return nil, nil, err
	}
	srv, err := serveGRPC("billing", ln, k, logger)
	return svc, srv, err
}

// startOrders serves the Orders role on ln. It calls Inventory over HTTP
// with its plain per-read-timeout client under Sundial's Transport, and
// Billing over gRPC.
func startOrders(ln net.Listener, cfg OrdersConfig, billingTarget, configFile string, logger *slog.Logger) (*Orders, *server, error) {
	billing, err := dialBilling(billingTarget, cfg.Dial)
	if err != nil {
		return nil, nil, err
	}
	hc := newServiceClient(cfg.withDefaults().ReadTimeout, cfg.Dial)
	svc := NewOrders(cfg, newJournal("orders", logger), hc, billing)
	k, err := newKernel(svc, configFile, logger)
	if err == nil {
		err = svc.connect(k)
	}
	if err != nil {
		billing.Close()
		return nil, nil, err
	}
	srv, err := serveHTTP("orders", ln, k, logger, nil)
	if err != nil {
		billing.Close()
		return nil, nil, err
	}
	return svc, withCleanup(srv, billing.Close, hc.CloseIdleConnections), nil
}

// startGateway serves the Gateway role on ln, with its minimum-remaining
// middleware at the Resilience stage.
func startGateway(ln net.Listener, cfg GatewayConfig, configFile string, logger *slog.Logger) (*Gateway, *server, error) {
	cfg = cfg.withDefaults()
	billing, err := dialBilling(cfg.Billing, cfg.Dial)
	if err != nil {
		return nil, nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if cfg.Dial != nil {
		tr.DialContext = cfg.Dial
	}
	hc := &http.Client{Transport: httpadapter.NewTransport(tr)}
	journal := newJournal("gateway", logger)
	svc := NewGateway(cfg, journal, hc, billing)
	k, err := newKernel(svc, configFile, logger,
		kernel.UseAt(pipeline.StageResilience, gatewayMinimum{min: cfg.MinRemaining, journal: journal}))
	if err == nil {
		err = svc.connect(k)
	}
	if err != nil {
		billing.Close()
		return nil, nil, err
	}
	srv, err := serveHTTP("gateway", ln, k, logger, nil)
	if err != nil {
		billing.Close()
		return nil, nil, err
	}
	return svc, withCleanup(srv, billing.Close, hc.CloseIdleConnections), nil
}

// withCleanup makes srv's stop also close the role's clients.
func withCleanup(srv *server, closeConn func() error, closeIdle func()) *server {
	stop := srv.stop
	srv.stop = func(ctx context.Context) error {
		err := stop(ctx)
		closeIdle()
		return errors.Join(err, closeConn())
	}
	return srv
}
