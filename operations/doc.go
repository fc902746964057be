// Package operations describes and registers the operations an application
// exposes.
//
// An operation is a typed function with a stable ID (see [ValidateID] for
// the grammar) and a [Descriptor] saying how protocols reach it. One
// registration serves every protocol: the HTTP, gRPC and CLI adapters all
// read the same [Registry].
//
//	reg := operations.NewRegistry()
//	err := operations.Register(reg, operations.Descriptor{
//		ID:      "orders.create",
//		Summary: "Create an order",
//		Method:  "POST", Path: "/orders",
//	}, createOrder) // func(context.Context, CreateOrder) (Order, error)
package operations
