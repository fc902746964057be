package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
)

// ClusterConfig configures the four roles of a Cluster. Addresses of the
// peers are filled in by StartCluster.
type ClusterConfig struct {
	Gateway   GatewayConfig
	Orders    OrdersConfig
	Inventory InventoryConfig
	Billing   BillingConfig
	// Listen gives each role's listen address by role name ("gateway",
	// "orders", "inventory", "billing"); a missing role listens on
	// "127.0.0.1:0".
	Listen map[string]string
	// Network, if set, opens the roles' listeners and connects the roles
	// to one another instead of TCP: tests use an in-memory network. Listen
	// is then ignored.
	Network Network
	// ConfigFile is loaded over the embedded config by every role.
	ConfigFile string
	// Logger returns the logger of a role (nil, or a nil result: discard).
	Logger func(role string) *slog.Logger
}

// Network is where the roles of a Cluster listen and how they reach one
// another.
type Network interface {
	// Listen opens the listener of role.
	Listen(role string) (net.Listener, error)
	// DialContext connects to the address of a listener Listen opened.
	DialContext(ctx context.Context, network, addr string) (net.Conn, error)
}

// dialFunc connects to an address, as net.Dialer's DialContext does.
type dialFunc = func(ctx context.Context, network, addr string) (net.Conn, error)

// Cluster is the four roles running in one process, each on its own
// listener, talking to each other over real sockets exactly as separate
// processes do.
type Cluster struct {
	Gateway   *Gateway
	Orders    *Orders
	Inventory *Inventory
	Billing   *Billing

	// Addrs are the listen addresses by role.
	Addrs map[string]string

	servers []*server // in start order
	network Network   // ClusterConfig.Network
}

// URL returns the base URL of an HTTP role ("gateway", "orders",
// "inventory").
func (c *Cluster) URL(role string) string { return "http://" + c.Addrs[role] }

// StartCluster starts Inventory, Billing, Orders and Gateway, in that
// order, wired to each other. On error, whatever started is stopped.
func StartCluster(cfg ClusterConfig) (_ *Cluster, err error) {
	c := &Cluster{Addrs: make(map[string]string, len(roles)), network: cfg.Network}
	lns := make(map[string]net.Listener, len(roles))
	defer func() {
		if err != nil {
			for _, ln := range lns {
				ln.Close()
			}
			c.Close(context.Background())
		}
	}()
	listen := func(r string) (net.Listener, error) {
		if cfg.Network != nil {
			return cfg.Network.Listen(r)
		}
		addr := cfg.Listen[r]
		if addr == "" {
			addr = "127.0.0.1:0"
		}
		return net.Listen("tcp", addr)
	}
	var dial dialFunc
	if cfg.Network != nil {
		dial = cfg.Network.DialContext
	}
	for _, r := range roles {
		ln, err := listen(r)
		if err != nil {
			return nil, fmt.Errorf("chain: %s: %w", r, err)
		}
		lns[r] = ln
		c.Addrs[r] = loopback(ln.Addr())
	}
	logger := func(r string) *slog.Logger {
		if cfg.Logger != nil {
			if l := cfg.Logger(r); l != nil {
				return l
			}
		}
		return slog.New(slog.DiscardHandler)
	}
	// take hands a role's listener to its server; the deferred cleanup
	// closes those not handed over yet, and a role that fails to start
	// leaves its listener in lns for it.
	take := func(r string) net.Listener { return lns[r] }
	started := func(r string, srv *server) {
		delete(lns, r) // the server owns it now
		c.servers = append(c.servers, srv)
	}
	var srv *server

	if c.Inventory, srv, err = startInventory(take("inventory"), cfg.Inventory, cfg.ConfigFile, logger("inventory")); err != nil {
		return nil, err
	}
	started("inventory", srv)

	if c.Billing, srv, err = startBilling(take("billing"), cfg.Billing, cfg.ConfigFile, logger("billing")); err != nil {
		return nil, err
	}
	started("billing", srv)

	oc := cfg.Orders
	oc.Inventory, oc.Dial = c.URL("inventory"), dial
	if c.Orders, srv, err = startOrders(take("orders"), oc, c.Addrs["billing"], cfg.ConfigFile, logger("orders")); err != nil {
		return nil, err
	}
	started("orders", srv)

	gc := cfg.Gateway
	gc.Orders, gc.Inventory, gc.Billing = c.URL("orders"), c.URL("inventory"), c.Addrs["billing"]
	gc.Dial = dial
	if c.Gateway, srv, err = startGateway(take("gateway"), gc, cfg.ConfigFile, logger("gateway")); err != nil {
		return nil, err
	}
	started("gateway", srv)
	return c, nil
}

// Close stops the roles, the callers first, each waiting for its in-flight
// calls until ctx ends.
func (c *Cluster) Close(ctx context.Context) error {
	var errs []error
	for i := len(c.servers) - 1; i >= 0; i-- {
		if err := c.servers[i].stop(ctx); err != nil {
			errs = append(errs, fmt.Errorf("chain: stopping %s: %w", c.servers[i].name, err))
		}
	}
	c.servers = nil
	return errors.Join(errs...)
}

// loopback returns addr as host:port, with an unspecified host (":7000")
// replaced by 127.0.0.1 so peers can dial it.
func loopback(addr net.Addr) string {
	ta, ok := addr.(*net.TCPAddr)
	if !ok || !ta.IP.IsUnspecified() {
		return addr.String()
	}
	return net.JoinHostPort("127.0.0.1", fmt.Sprint(ta.Port))
}
