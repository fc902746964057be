// Package app is the shop sample's application: its operations, its
// in-memory store and its embedded default configuration. The shop binary
// (samples/shop) serves it over HTTP, gRPC and the CLI.
package app

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
)

// DefaultConfig is the shop's embedded default configuration.
//
//go:embed shop.json
var DefaultConfig []byte

// CreateOrder is the input of orders.create.
type CreateOrder struct {
	Name   string `json:"name"`
	Amount int    `json:"amount"`
}

// Validate implements operations.Validator.
func (c *CreateOrder) Validate() error {
	if c.Name == "" {
		return invalid("name", "name must not be empty")
	}
	if c.Amount <= 0 {
		return invalid("amount", "amount must be greater than 0")
	}
	return nil
}

// Order is an order as stored and returned.
type Order struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	Amount int    `json:"amount"`
}

// GetOrder is the input of orders.get.
type GetOrder struct {
	ID string `json:"id" param:"id"`
}

// Validate implements operations.Validator.
func (g *GetOrder) Validate() error {
	if g.ID == "" {
		return invalid("id", "id must not be empty")
	}
	return nil
}

// ExportReport is the input of reports.export.
type ExportReport struct {
	DelayMs int `json:"delayMs"`
}

// Validate implements operations.Validator.
func (e *ExportReport) Validate() error {
	if e.DelayMs < 0 {
		return invalid("delayMs", "delayMs must not be negative")
	}
	return nil
}

// Report is the output of reports.export.
type Report struct {
	Rows int `json:"rows"`
}

// Charge is the input of billing.charge.
type Charge struct {
	Amount int  `json:"amount"`
	Fail   bool `json:"fail"`
}

// Validate implements operations.Validator.
func (c *Charge) Validate() error {
	if c.Amount <= 0 {
		return invalid("amount", "amount must be greater than 0")
	}
	return nil
}

// Receipt is the output of billing.charge.
type Receipt struct {
	Amount  int  `json:"amount"`
	Charged bool `json:"charged"`
}

func invalid(field, msg string) error {
	return pipeline.Validation("SHOP_VALIDATION_001", msg).WithDetail("field", field)
}

// Shop is the application state: an in-memory order store.
type Shop struct {
	mu     sync.Mutex // guards orders and next
	orders map[string]Order
	next   int
}

// New returns an empty shop.
func New() *Shop { return &Shop{orders: make(map[string]Order)} }

// Register registers the shop's operations on reg.
func (s *Shop) Register(reg *operations.Registry) error {
	return firstErr(
		operations.Register(reg, operations.Descriptor{
			ID: "orders.create", Summary: "Create an order.", Method: "POST", Path: "/orders",
		}, s.CreateOrder),
		operations.Register(reg, operations.Descriptor{
			ID: "orders.get", Summary: "Get an order by ID.", Method: "GET", Path: "/orders/:id", Idempotent: true,
		}, s.GetOrder),
		operations.Register(reg, operations.Descriptor{
			ID: "reports.export", Summary: "Export a report, working about delayMs milliseconds.", Method: "POST", Path: "/reports/export", Idempotent: true,
		}, s.ExportReport),
		operations.Register(reg, operations.Descriptor{
			ID: "billing.charge", Summary: "Charge an amount; fail=true simulates a payment provider that is down.", Method: "POST", Path: "/billing/charge",
		}, s.Charge),
	)
}

// CreateOrder stores a new order.
func (s *Shop) CreateOrder(_ context.Context, in CreateOrder) (Order, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.next++
	o := Order{ID: "ord-" + strconv.Itoa(s.next), Name: in.Name, Amount: in.Amount}
	s.orders[o.ID] = o
	return o, nil
}

// GetOrder returns a stored order, or NOT_FOUND.
func (s *Shop) GetOrder(_ context.Context, in GetOrder) (Order, error) {
	s.mu.Lock()
	o, ok := s.orders[in.ID]
	s.mu.Unlock()
	if !ok {
		return Order{}, pipeline.NotFound("SHOP_NOT_FOUND_001", fmt.Sprintf("Order '%s' does not exist.", in.ID)).WithDetail("id", in.ID)
	}
	return o, nil
}

// ExportReport works for about DelayMs milliseconds, stopping at once when
// its context ends (it then returns the context's error, which the
// DeadlineMiddleware attributes).
func (s *Shop) ExportReport(ctx context.Context, in ExportReport) (Report, error) {
	t := time.NewTimer(time.Duration(in.DelayMs) * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
		return Report{Rows: 100 + in.DelayMs/10}, nil
	case <-ctx.Done():
		return Report{}, ctx.Err()
	}
}

// Charge charges the amount, or fails with UNAVAILABLE SHOP_UNAVAILABLE_001
// when Fail is set (a payment provider that is down).
func (s *Shop) Charge(_ context.Context, in Charge) (Receipt, error) {
	if in.Fail {
		return Receipt{}, pipeline.Unavailable("SHOP_UNAVAILABLE_001", "The payment provider is unavailable.")
	}
	return Receipt{Amount: in.Amount, Charged: true}, nil
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
