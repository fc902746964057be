package main

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience"
)

// Reasons the gateway gives in the details of its budget failures
// (experiment 6).
const (
	// ReasonGatewayMinimum: the request arrived with less time than the
	// gateway's minimum; nothing was called.
	ReasonGatewayMinimum = "remaining below gateway minimum"
	// ReasonDownstreamMinimum: the share a dependency would get is below
	// the smallest timeout worth starting a call with; it was not called.
	ReasonDownstreamMinimum = "remaining below downstream minimum"
	// ReasonDownstreamTimeout: a dependency did not answer within its
	// share of the budget.
	ReasonDownstreamTimeout = "downstream timeout"
)

// Dependency is one downstream call of gateway.order: Inventory's
// /slow with DelayMs of latency, given Share of the gateway's budget.
type Dependency struct {
	Name    string
	Share   float64
	DelayMs int
}

// GatewayConfig configures the Gateway role.
type GatewayConfig struct {
	// Orders and Inventory are base URLs ("http://127.0.0.1:7001");
	// Billing is a gRPC target ("127.0.0.1:7003").
	Orders    string
	Inventory string
	Billing   string
	// MinRemaining is the least time a request must bring to be worth
	// starting (default 30 ms).
	MinRemaining time.Duration
	// Reserve is kept back for the gateway's own work after its calls
	// (default 10 ms).
	Reserve time.Duration
	// MinDownstream is the smallest timeout worth starting a downstream
	// call with (default 20 ms).
	MinDownstream time.Duration
	// Primary and Secondary are gateway.order's two dependencies (defaults:
	// "primary", share 0.6, 120 ms; "secondary", share 0.3, 30 ms).
	Primary, Secondary Dependency
}

func (c GatewayConfig) withDefaults() GatewayConfig {
	if c.MinRemaining <= 0 {
		c.MinRemaining = 30 * time.Millisecond
	}
	if c.Reserve <= 0 {
		c.Reserve = 10 * time.Millisecond
	}
	if c.MinDownstream <= 0 {
		c.MinDownstream = 20 * time.Millisecond
	}
	if c.Primary.Name == "" {
		c.Primary = Dependency{Name: "primary", Share: 0.6, DelayMs: 120}
	}
	if c.Secondary.Name == "" {
		c.Secondary = Dependency{Name: "secondary", Share: 0.3, DelayMs: 30}
	}
	return c
}

// OrderView is the output of gateway.order.
type OrderView struct {
	Primary   SlowDone `json:"primary"`
	Secondary SlowDone `json:"secondary"`
}

// Fanout is the output of gateway.fanout.
type Fanout struct {
	Inventory SlowDone `json:"inventory"`
	Billing   SlowDone `json:"billing"`
}

// Gateway is the edge service: it gives Orders its checkout budget
// (TimeoutSeconds of gateway.checkout), splits a request's remaining time
// between two dependencies (gateway.order), and fans out to Inventory
// over HTTP and Billing over gRPC at once (gateway.fanout).
type Gateway struct {
	cfg       GatewayConfig
	journal   *Journal
	orders    *jsonClient
	inventory *jsonClient
	billing   BillingClient
}

// NewGateway returns a Gateway calling Orders and Inventory with hc and
// Billing with billing.
func NewGateway(cfg GatewayConfig, journal *Journal, hc *http.Client, billing BillingClient) *Gateway {
	cfg = cfg.withDefaults()
	return &Gateway{
		cfg:       cfg,
		journal:   journal,
		orders:    &jsonClient{name: "orders", base: cfg.Orders, hc: hc},
		inventory: &jsonClient{name: "inventory", base: cfg.Inventory, hc: hc},
		billing:   billing,
	}
}

// Journal returns the service's event journal.
func (g *Gateway) Journal() *Journal { return g.journal }

// Register registers the Gateway operations on reg.
func (g *Gateway) Register(reg *operations.Registry) error {
	return firstErr(
		operations.Register(reg, operations.Descriptor{
			ID: "gateway.checkout", Summary: "Check out: submit the order to Orders under the gateway's budget.",
			Method: http.MethodPost, Path: "/checkout", SuccessStatus: http.StatusCreated,
		}, g.Checkout),
		operations.Register(reg, operations.Descriptor{
			ID: "gateway.order", Summary: "Call a primary and a secondary dependency, each with its share of the remaining time.",
			Method: http.MethodGet, Path: "/order", Idempotent: true,
		}, g.Order),
		operations.Register(reg, operations.Descriptor{
			ID: "gateway.fanout", Summary: "Call Inventory (HTTP) and Billing (gRPC) at once; both stop when the client leaves.",
			Method: http.MethodGet, Path: "/fanout", Idempotent: true,
		}, g.Fanout),
	)
}

// Checkout submits the order to Orders with the invocation's context: the
// deadline travels in the Sundial-Deadline header.
func (g *Gateway) Checkout(ctx context.Context, in SubmitOrder) (OrderResult, error) {
	g.journal.Record(ctx, "checkout", "strategy", in.Strategy)
	var out OrderResult
	err := g.orders.post(ctx, "/orders", in, &out)
	g.journal.Record(ctx, "checkout-done", "outcome", describe(err))
	return out, err
}

// Order calls the primary dependency, then the secondary one, each with
// its share of what remains after the gateway's reserve.
func (g *Gateway) Order(ctx context.Context, _ struct{}) (OrderView, error) {
	b, err := resilience.NewBudget(ctx, "gateway.order",
		resilience.WithMargin(g.cfg.Reserve), resilience.WithMinTimeout(g.cfg.MinDownstream))
	if err != nil {
		return OrderView{}, budgetFailure(err, ReasonGatewayMinimum)
	}
	var out OrderView
	if out.Primary, err = g.callShare(ctx, b, g.cfg.Primary); err != nil {
		return out, err
	}
	if out.Secondary, err = g.callShare(ctx, b, g.cfg.Secondary); err != nil {
		return out, err
	}
	return out, nil
}

// callShare calls one dependency under its share of b. A share below the
// minimum is refused before the call; a call that runs out of its share
// is a TIMEOUT naming the dependency, its budget and the elapsed time.
func (g *Gateway) callShare(ctx context.Context, b *resilience.Budget, dep Dependency) (SlowDone, error) {
	cctx, cancel, err := b.Context(ctx, resilience.Call{Dependency: dep.Name, Share: dep.Share})
	if err != nil {
		g.journal.Record(ctx, "budget-exhausted", "dependency", dep.Name, "reason", ReasonDownstreamMinimum)
		return SlowDone{}, budgetFailure(err, ReasonDownstreamMinimum)
	}
	defer cancel()
	start := time.Now()
	dl, _ := cctx.Deadline()
	budget := dl.Sub(start)
	var out SlowDone
	err = g.inventory.get(cctx, "/slow?delayMs="+strconv.Itoa(dep.DelayMs), &out)
	elapsed := time.Since(start)
	if err == nil {
		return out, nil
	}
	if ctx.Err() != nil || pipeline.KindOf(err) != pipeline.KindTimeout {
		return out, err // the gateway's own deadline or cancellation, or another failure
	}
	// The dependency's share ran out: cut here, or answered 504 by the
	// dependency itself at the deadline it was sent.
	g.journal.Record(ctx, "budget-exhausted", "dependency", dep.Name, "reason", ReasonDownstreamTimeout,
		"budgetMs", strconv.FormatInt(budget.Milliseconds(), 10), "elapsedMs", strconv.FormatInt(elapsed.Milliseconds(), 10))
	cut := &resilience.BudgetExhaustedError{Stage: "gateway.order", Dependency: dep.Name, Remaining: b.Remaining(start), Allotted: budget, Cut: true}
	return out, cut.Outcome().
		WithCause(err).
		WithDetail("reason", ReasonDownstreamTimeout).
		WithDetail("budgetMs", budget.Milliseconds()).
		WithDetail("elapsedMs", elapsed.Milliseconds())
}

// budgetFailure adds a reason to a Budget's exhausted outcome; other
// errors (invalid options) pass unchanged.
func budgetFailure(err error, reason string) error {
	var bee *resilience.BudgetExhaustedError
	if !errors.As(err, &bee) {
		return err
	}
	return pipeline.AsError(err).WithDetail("reason", reason)
}

// Fanout calls Inventory's slow operation over HTTP and Billing's over
// gRPC at the same time and waits for both. When the client goes away,
// the invocation's context is cancelled and both calls with it: the HTTP
// request's connection is closed and the gRPC stream is reset, so each
// dependency's handler context ends too.
func (g *Gateway) Fanout(ctx context.Context, in Slow) (Fanout, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g.journal.Record(ctx, "fanout-started", "delayMs", strconv.Itoa(in.DelayMs))
	var (
		out             Fanout
		invErr, billErr error
		wg              sync.WaitGroup
	)
	wg.Go(func() {
		invErr = g.inventory.get(ctx, "/slow?delayMs="+strconv.Itoa(in.DelayMs), &out.Inventory)
		if invErr != nil {
			cancel()
		}
	})
	wg.Go(func() {
		out.Billing, billErr = g.billing.Slow(ctx, in)
		if billErr != nil {
			cancel()
		}
	})
	wg.Wait()
	err := firstErr(invErr, billErr)
	g.journal.Record(ctx, "fanout-ended", "outcome", describe(err), "cause", pipeline.ErrorText(context.Cause(ctx)))
	return out, err
}

// gatewayMinimum is the Gateway's application middleware at the
// Resilience stage: an invocation whose deadline leaves no more than min
// is answered at once with a TIMEOUT (504), reason
// ReasonGatewayMinimum, before anything downstream is called. An
// invocation without a deadline passes.
type gatewayMinimum struct {
	min     time.Duration
	journal *Journal
}

// Invoke implements pipeline.Middleware.
func (m gatewayMinimum) Invoke(ctx context.Context, inv *pipeline.Invocation, next pipeline.Handler) (any, error) {
	if _, ok := inv.Deadline(); ok {
		if _, err := resilience.NewBudget(ctx, "gateway", resilience.WithMargin(m.min)); err != nil {
			m.journal.Record(ctx, "budget-exhausted", "operation", inv.Name(), "reason", ReasonGatewayMinimum)
			return nil, pipeline.AsError(budgetFailure(err, ReasonGatewayMinimum)).WithDetail("minimumMs", m.min.Milliseconds())
		}
	}
	return next(ctx, inv)
}
