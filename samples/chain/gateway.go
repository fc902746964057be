package main

import (
	"context"
	"crypto/rand"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/kernel/client"
	"github.com/sundial-go/sundial/kernel/propagation"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience/outbound"
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
	// CheckoutAttempts is how many times gateway.checkout may submit an
	// order (default 1). A submit that answers TIMEOUT (504), or CONFLICT
	// with a retry-after (409: an earlier attempt's charge still runs), is
	// sent again after CheckoutBackoff or the retry-after, while the
	// gateway's deadline leaves time for it — with the same idempotency
	// key each time: the client's, or one the gateway makes.
	CheckoutAttempts int
	// CheckoutAttemptTimeout caps each attempt (default 0: an attempt may
	// use all the time the gateway has left).
	CheckoutAttemptTimeout time.Duration
	// CheckoutBackoff is the pause after an attempt that timed out
	// (default 50 ms).
	CheckoutBackoff time.Duration
	// RetryWithoutKey is the anti-pattern experiment 8 shows: the gateway
	// makes no idempotency key, so every retry after a 504 charges again.
	RetryWithoutKey bool
	// Dial, if set, connects the gateway to its dependencies instead of
	// TCP.
	Dial dialFunc
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
	c.CheckoutAttempts = max(c.CheckoutAttempts, 1)
	if c.CheckoutAttemptTimeout < 0 {
		c.CheckoutAttemptTimeout = 0
	}
	if c.CheckoutBackoff <= 0 {
		c.CheckoutBackoff = 50 * time.Millisecond
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
	cfg     GatewayConfig
	journal *Journal
	hc      *http.Client
	orders  *client.Client[SubmitOrder, OrderResult] // set by connect
	inv     *inventoryClients                        // set by connect
	billing BillingClient
}

// NewGateway returns a Gateway calling Orders and Inventory with hc and
// Billing with billing.
func NewGateway(cfg GatewayConfig, journal *Journal, hc *http.Client, billing BillingClient) *Gateway {
	cfg = cfg.withDefaults()
	return &Gateway{cfg: cfg, journal: journal, hc: hc, billing: billing}
}

// Journal returns the service's event journal.
func (g *Gateway) Journal() *Journal { return g.journal }

// connect makes the gateway's typed clients, under the dependencies of
// its kernel k: "orders", "inventory" and "billing".
func (g *Gateway) connect(k *kernel.Kernel) error {
	var err error
	if g.orders, err = newOrdersClient(g.cfg.Orders, g.hc.Transport, dependency(k, "orders")); err != nil {
		return err
	}
	if g.inv, err = newInventoryClients(g.cfg.Inventory, g.hc.Transport, dependency(k, "inventory")); err != nil {
		return err
	}
	if b, ok := g.billing.(*grpcBilling); ok {
		return b.under(dependency(k, "billing"))
	}
	return nil
}

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
// deadline travels in the Sundial-Deadline header. With CheckoutAttempts
// above 1 it retries a submit that timed out or found the order's charge
// still running, under one idempotency key (see GatewayConfig): Billing
// then charges the card once, however many attempts it takes, and the
// attempt that succeeds gets that charge's receipt.
func (g *Gateway) Checkout(ctx context.Context, in SubmitOrder) (OrderResult, error) {
	g.journal.Record(ctx, "checkout", "strategy", in.Strategy)
	if g.cfg.CheckoutAttempts > 1 && !g.cfg.RetryWithoutKey && propagation.IdempotencyKey(ctx) == "" {
		ctx, _ = propagation.WithIdempotencyKey(ctx, "checkout-"+rand.Text())
	}
	var (
		out OrderResult
		err error
	)
	for attempt := 1; ; attempt++ {
		out, err = g.submit(ctx, in, attempt)
		if err == nil || attempt >= g.cfg.CheckoutAttempts || ctx.Err() != nil {
			break
		}
		wait, ok := g.retryWait(ctx, err)
		if !ok {
			break
		}
		g.journal.Record(ctx, "checkout-retry", "attempt", strconv.Itoa(attempt), "outcome", describe(err),
			"waitMs", strconv.FormatInt(wait.Milliseconds(), 10))
		if err = sleep(ctx, wait); err != nil {
			break
		}
	}
	g.journal.Record(ctx, "checkout-done", "outcome", describe(err))
	return out, err
}

// submit is one attempt of a checkout, capped at CheckoutAttemptTimeout.
func (g *Gateway) submit(ctx context.Context, in SubmitOrder, attempt int) (OrderResult, error) {
	if g.cfg.CheckoutAttempts > 1 {
		g.journal.Record(ctx, "checkout-attempt", "attempt", strconv.Itoa(attempt), "key", propagation.IdempotencyKey(ctx))
	}
	if g.cfg.CheckoutAttemptTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, g.cfg.CheckoutAttemptTimeout)
		defer cancel()
	}
	return g.orders.Call(ctx, in)
}

// retryWait returns how long to wait before retrying a submit that failed
// with err, and false when it is not worth retrying: a failure other than
// TIMEOUT or a CONFLICT with a retry-after, or a wait that would leave the
// gateway no time for the retry (the client then gets the 409 and its
// Retry-After itself).
func (g *Gateway) retryWait(ctx context.Context, err error) (time.Duration, bool) {
	pe := pipeline.AsError(err)
	wait := g.cfg.CheckoutBackoff
	switch pe.Kind() {
	case pipeline.KindTimeout:
	case pipeline.KindConflict:
		d, ok := pe.RetryAfter()
		if !ok {
			return 0, false
		}
		wait = d
	default:
		return 0, false
	}
	if left, ok := remaining(ctx); ok && left <= wait+g.cfg.MinDownstream {
		return 0, false
	}
	return wait, true
}

// Order calls the primary dependency, then the secondary one, each with
// its share of what remains after the gateway's reserve.
func (g *Gateway) Order(ctx context.Context, _ struct{}) (OrderView, error) {
	b, err := outbound.NewBudget(ctx, "gateway.order",
		outbound.WithMargin(g.cfg.Reserve), outbound.WithMinTimeout(g.cfg.MinDownstream))
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
func (g *Gateway) callShare(ctx context.Context, b *outbound.Budget, dep Dependency) (SlowDone, error) {
	cctx, cancel, err := b.Context(ctx, outbound.Call{Dependency: dep.Name, Share: dep.Share})
	if err != nil {
		g.journal.Record(ctx, "budget-exhausted", "dependency", dep.Name, "reason", ReasonDownstreamMinimum)
		return SlowDone{}, budgetFailure(err, ReasonDownstreamMinimum)
	}
	defer cancel()
	start := time.Now()
	dl, _ := cctx.Deadline()
	budget := dl.Sub(start)
	out, err := g.inv.slow.Call(cctx, Slow{DelayMs: dep.DelayMs})
	elapsed := time.Since(start)
	if err == nil {
		return out, nil
	}
	if ctx.Err() != nil || pipeline.AsError(err).Kind() != pipeline.KindTimeout {
		return out, err // the gateway's own deadline or cancellation, or another failure
	}
	// The dependency's share ran out: cut here, or answered 504 by the
	// dependency itself at the deadline it was sent.
	g.journal.Record(ctx, "budget-exhausted", "dependency", dep.Name, "reason", ReasonDownstreamTimeout,
		"budgetMs", strconv.FormatInt(budget.Milliseconds(), 10), "elapsedMs", strconv.FormatInt(elapsed.Milliseconds(), 10))
	end, _ := ctx.Deadline() // the budget's end: it has no WithTotal
	cut := &outbound.BudgetExhaustedError{Stage: "gateway.order", Dependency: dep.Name, Remaining: end.Sub(start), Allotted: budget, Cut: true}
	o := cut.Outcome()
	e := pipeline.Wrap(o.Kind(), o.Code(), o.Message(), err) // the downstream's error, not cut
	for k, v := range o.Details() {
		e = e.WithDetail(k, v)
	}
	return out, e.
		WithDetail("reason", ReasonDownstreamTimeout).
		WithDetail("budgetMs", budget.Milliseconds()).
		WithDetail("elapsedMs", elapsed.Milliseconds())
}

// budgetFailure adds a reason to a Budget's exhausted outcome; other
// errors (invalid options) pass unchanged.
func budgetFailure(err error, reason string) error {
	var bee *outbound.BudgetExhaustedError
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
		out.Inventory, invErr = g.inv.slow.Call(ctx, in)
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
		if _, err := outbound.NewBudget(ctx, "gateway", outbound.WithMargin(m.min)); err != nil {
			m.journal.Record(ctx, "budget-exhausted", "operation", inv.Name(), "reason", ReasonGatewayMinimum)
			return nil, pipeline.AsError(budgetFailure(err, ReasonGatewayMinimum)).WithDetail("minimumMs", m.min.Milliseconds())
		}
	}
	return next(ctx, inv)
}
