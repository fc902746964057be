package main

import (
	"net/http"

	"github.com/sundial-go/sundial/adapters/httpadapter"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/kernel/client"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/resilience/outbound"
)

// The downstream calls of Orders and the gateway go through typed clients
// (kernel/client): one per operation, built from the callee's own
// registrations and Go types, with no generated code. The transport is
// picked here; the call sites only say c.Call(ctx, in). Each client runs
// under the caller's kernel's dependency of the same name
// (Sundial.Kernel.Dependencies.<name>), when chain.json or the config
// file declares one.

// inventoryClients are the typed clients of Inventory's operations.
type inventoryClients struct {
	reserve *client.Client[Reserve, Reservation]
	release *client.Client[Release, Released]
	slow    *client.Client[Slow, SlowDone]
}

// newInventoryClients returns the clients of Inventory at base, over rt,
// under dep (nil: no outbound policy).
func newInventoryClients(base string, rt http.RoundTripper, dep *outbound.Dependency) (*inventoryClients, error) {
	reg := operations.NewRegistry()
	if err := NewInventory(InventoryConfig{}, newJournal("inventory", nil)).Register(reg); err != nil {
		return nil, err
	}
	t := httpadapter.ClientTransport(reg, base, rt)
	var (
		c   inventoryClients
		err error
	)
	c.reserve = bind[Reserve, Reservation](t, "inventory.reserve", dep, &err)
	c.release = bind[Release, Released](t, "inventory.release", dep, &err)
	c.slow = bind[Slow, SlowDone](t, "inventory.slow", dep, &err)
	return &c, err
}

// newOrdersClient returns the client of orders.submit at base, over rt,
// under dep.
func newOrdersClient(base string, rt http.RoundTripper, dep *outbound.Dependency) (*client.Client[SubmitOrder, OrderResult], error) {
	reg := operations.NewRegistry()
	if err := NewOrders(OrdersConfig{}, newJournal("orders", nil), nil, nil).Register(reg); err != nil {
		return nil, err
	}
	var err error
	c := bind[SubmitOrder, OrderResult](httpadapter.ClientTransport(reg, base, rt), "orders.submit", dep, &err)
	return c, err
}

// bind returns the client of operation id over t under dep, or nil after
// setting *err when *err is nil.
func bind[In, Out any](t client.Transport, id string, dep *outbound.Dependency, err *error) *client.Client[In, Out] {
	c, e := client.New[In, Out](t, id, client.WithDependency(dep))
	if e != nil && *err == nil {
		*err = e
	}
	return c
}

// dependency returns k's dependency name, or nil when k has none.
func dependency(k *kernel.Kernel, name string) *outbound.Dependency {
	if k == nil {
		return nil
	}
	return k.Dependency(name)
}
