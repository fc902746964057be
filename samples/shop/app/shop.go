// Package app is the shop sample's application: its operations, its
// order store and its embedded default configuration. The shop binary
// (samples/shop) serves it over HTTP, gRPC and the CLI.
//
// The shop keeps its orders in memory only, in a map in the process: they
// are lost when the process stops, and each process has its own, so two
// replicas behind one load balancer do not see each other's orders. That
// keeps the sample self-contained; a real service keeps its orders in a
// database.
package app

import (
	"context"
	_ "embed"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
)

// DefaultConfig is the shop's embedded default configuration.
//
//go:embed shop.json
var DefaultConfig []byte

// CreateOrder is the input of orders.create. Its constraints are declared
// once, in validate tags (docs/validation.md): checked alike over HTTP,
// gRPC and the CLI, and published in the OpenAPI document, the gRPC
// schema and the CLI's help. Currency may be left out (EUR).
type CreateOrder struct {
	Name     string `json:"name" validate:"required,min=1,max=100"`
	Amount   int    `json:"amount" validate:"min=1,max=10000"`
	Currency string `json:"currency,omitempty" validate:"omitempty,oneof=EUR USD"`
}

// Order is an order as stored and returned.
type Order struct {
	ID       string `json:"id"`
	Name     string `json:"name"`
	Amount   int    `json:"amount"`
	Currency string `json:"currency,omitempty"` // "" is EUR
}

// GetOrder is the input of orders.get.
type GetOrder struct {
	ID string `json:"id" param:"id" validate:"required,max=64"`
}

// ExportReport is the input of reports.export.
type ExportReport struct {
	DelayMs int `json:"delayMs" validate:"min=0,max=3600000"` // 0 to MaxDelayMs
}

// MaxDelayMs is the largest delayMs reports.export accepts (its max
// constraint): one hour, longer than any deadline the shop allows
// (MaxTimeoutSeconds), and far below the 2^63 ns a time.Duration holds, so
// that the delay computation cannot overflow (a delayMs near 2^63 would
// otherwise wrap to a negative duration and answer at once).
const MaxDelayMs = 3_600_000

// Report is the output of reports.export.
type Report struct {
	Rows int `json:"rows"`
}

// Charge is the input of billing.charge.
type Charge struct {
	Amount int  `json:"amount" validate:"min=1,max=10000"`
	Fail   bool `json:"fail"`
	// ProcessMs is how long the payment provider takes (0 to MaxDelayMs);
	// the charge runs to its end once started, whatever the deadline says,
	// as a provider call that cannot be cut half-way does.
	ProcessMs int `json:"processMs" validate:"min=0,max=3600000"`
	// ReceiptEmail, if given, is where the receipt goes; Invoice, if
	// given, names the invoice paid ("INV-42").
	ReceiptEmail string `json:"receiptEmail,omitempty" validate:"omitempty,email"`
	Invoice      string `json:"invoice,omitempty" validate:"omitempty,pattern=^INV-[0-9]+$"`
}

// Receipt is the output of billing.charge.
type Receipt struct {
	Amount  int  `json:"amount"`
	Charged bool `json:"charged"`
	// ChargeID names the charge: one per execution of billing.charge.
	ChargeID string `json:"chargeId"`
}

// WatchOrders is the input of orders.watch.
type WatchOrders struct {
	// After is the sequence number of the last order the caller saw: the
	// watch starts with the next one. 0 watches every order.
	After int `json:"after" query:"after" validate:"min=0"`
}

// OrderEvent is one message of orders.watch: an order created, and its
// sequence number, 1 for the shop's first order.
type OrderEvent struct {
	Seq   int   `json:"seq"`
	Order Order `json:"order"`
}

// Imported is the output of orders.import.
type Imported struct {
	// Created is the number of orders created; First and Last their
	// first and last ID ("" when none).
	Created int    `json:"created"`
	First   string `json:"first,omitempty"`
	Last    string `json:"last,omitempty"`
}

// Shop is the application state: its orders, kept in memory only (see the
// package comment): a restart loses them.
type Shop struct {
	mu      sync.Mutex // guards orders, log, next and created
	orders  map[string]Order
	log     []Order       // the orders in the order created: log[i] has sequence number i+1
	created chan struct{} // closed, then replaced, when an order is created
	next    int
	charges atomic.Int64
}

// Charges returns how many charges billing.charge made.
func (s *Shop) Charges() int64 { return s.charges.Load() }

// New returns an empty shop.
func New() *Shop { return &Shop{orders: make(map[string]Order), created: make(chan struct{})} }

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
		operations.RegisterServerStream(reg, operations.Descriptor{
			ID: "orders.watch", Summary: "Watch the orders created, from the one after a sequence number.",
		}, s.WatchOrders),
		operations.RegisterClientStream(reg, operations.Descriptor{
			ID: "orders.import", Summary: "Create an order for each line sent.",
		}, s.ImportOrders),
	)
}

// CreateOrder stores a new order.
func (s *Shop) CreateOrder(_ context.Context, in CreateOrder) (Order, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.next++
	o := Order{ID: "ord-" + strconv.Itoa(s.next), Name: in.Name, Amount: in.Amount, Currency: in.Currency}
	s.orders[o.ID] = o
	s.log = append(s.log, o)
	close(s.created)
	s.created = make(chan struct{})
	return o, nil
}

// WatchOrders sends each order created after in.After, then each new one
// as it is created, until its context ends. A resume cursor (SSE's
// Last-Event-ID), when it is a sequence number, takes the place of
// in.After.
func (s *Shop) WatchOrders(ctx context.Context, in WatchOrders, out *operations.Sender[OrderEvent]) error {
	seen := in.After
	if n, err := strconv.Atoi(out.Resume()); err == nil && n >= 0 {
		seen = n
	}
	for {
		s.mu.Lock()
		batch := s.log[min(seen, len(s.log)):]
		created := s.created
		s.mu.Unlock()
		for _, o := range batch {
			seen++
			if err := out.Send(OrderEvent{Seq: seen, Order: o}); err != nil {
				return err
			}
		}
		select {
		case <-created:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// ImportOrders creates an order for each line the caller sends. The
// kernel checks each line's constraints (CreateOrder's validate tags); a
// line that fails ends the stream, and the orders created before it stay.
func (s *Shop) ImportOrders(ctx context.Context, in *operations.Receiver[CreateOrder]) (Imported, error) {
	var res Imported
	for {
		line, err := in.Recv()
		if err == io.EOF {
			return res, nil
		}
		if err != nil {
			return Imported{}, err
		}
		o, _ := s.CreateOrder(ctx, line)
		if res.Created == 0 {
			res.First = o.ID
		}
		res.Created, res.Last = res.Created+1, o.ID
	}
}

// GetOrder returns a stored order, or NOT_FOUND.
func (s *Shop) GetOrder(_ context.Context, in GetOrder) (Order, error) {
	s.mu.Lock()
	o, ok := s.orders[in.ID]
	s.mu.Unlock()
	if !ok {
		return Order{}, pipeline.NewError(pipeline.KindNotFound, "SHOP_NOT_FOUND_001", fmt.Sprintf("Order '%s' does not exist.", in.ID)).WithDetail("id", in.ID)
	}
	return o, nil
}

// ExportReport works for about DelayMs milliseconds, stopping at once when
// its context ends (it then returns the context's error, which the
// DeadlineMiddleware attributes). The pipeline has validated DelayMs
// (0 to MaxDelayMs); a direct call with a larger one is clamped to
// MaxDelayMs rather than overflow.
func (s *Shop) ExportReport(ctx context.Context, in ExportReport) (Report, error) {
	t := time.NewTimer(time.Duration(min(max(in.DelayMs, 0), MaxDelayMs)) * time.Millisecond)
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
//
// billing.charge takes idempotency keys (shop.json, docs/idempotency.md): a
// retry with the key of a charge that timed out gets that charge, not a
// second one.
func (s *Shop) Charge(_ context.Context, in Charge) (Receipt, error) {
	if in.Fail {
		return Receipt{}, pipeline.NewError(pipeline.KindUnavailable, "SHOP_UNAVAILABLE_001", "The payment provider is unavailable.")
	}
	if in.ProcessMs > 0 {
		time.Sleep(time.Duration(min(in.ProcessMs, MaxDelayMs)) * time.Millisecond)
	}
	n := s.charges.Add(1)
	return Receipt{Amount: in.Amount, Charged: true, ChargeID: "ch-" + strconv.FormatInt(n, 10)}, nil
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
