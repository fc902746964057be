package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/baggage"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/kernel/propagation"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience/outbound"
)

// Strategies of orders.submit: how Orders gives time to its two
// downstream calls.
const (
	// StrategyPropagate passes the incoming deadline down unchanged: each
	// call gets what is left of the caller's budget.
	StrategyPropagate = "propagate"
	// StrategyFresh is the anti-pattern of experiment 3: each call gets a
	// fresh FreshTimeout, whatever the caller has left.
	StrategyFresh = "fresh"
	// StrategyReserve splits the budget (experiment 4): a safety margin
	// for Orders itself, and time kept back for Billing while Inventory
	// works.
	StrategyReserve = "reserve"
)

// OrdersConfig configures the Orders role.
type OrdersConfig struct {
	// Inventory is Inventory's base URL, e.g. "http://127.0.0.1:7002".
	Inventory string
	// ReadTimeout is the per-read timeout of Orders' plain HTTP client: the
	// longest pause allowed between two reads (default 5 s; experiment 1
	// uses 1 s). It bounds a pause, not a call.
	ReadTimeout time.Duration
	// StockPath is the Inventory path stock reads go to (default
	// "/stock"; experiment 2 points it at "/silent").
	StockPath string
	// Attempts, AttemptTimeout and Backoff shape the stock read's retries:
	// up to Attempts tries, each capped at AttemptTimeout (never beyond
	// the caller's deadline), Backoff apart (defaults 3, 1 s, 10 ms).
	Attempts       int
	AttemptTimeout time.Duration
	Backoff        time.Duration
	// LocalWork is the local work between two stock reads (default 500 ms).
	LocalWork time.Duration
	// FreshTimeout is the per-call timeout of StrategyFresh (default 5 s).
	FreshTimeout time.Duration
	// Margin, ReserveForBilling and CallCap configure StrategyReserve
	// (defaults 200 ms, 500 ms, 5 s).
	Margin            time.Duration
	ReserveForBilling time.Duration
	CallCap           time.Duration
	// IgnoreRetryMark is the anti-pattern experiment 11 shows: Orders
	// drops the retry mark of a call its caller retries, so its Billing
	// client retries too, and every tier multiplies the leaf's load.
	IgnoreRetryMark bool
	// Dial, if set, connects Orders to Inventory and Billing instead of
	// TCP.
	Dial dialFunc
}

func (c OrdersConfig) withDefaults() OrdersConfig {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.ReadTimeout, 5*time.Second)
	def(&c.AttemptTimeout, time.Second)
	def(&c.Backoff, 10*time.Millisecond)
	def(&c.LocalWork, 500*time.Millisecond)
	def(&c.FreshTimeout, 5*time.Second)
	def(&c.Margin, 200*time.Millisecond)
	def(&c.ReserveForBilling, 500*time.Millisecond)
	def(&c.CallCap, 5*time.Second)
	if c.Attempts <= 0 {
		c.Attempts = 3
	}
	if c.StockPath == "" {
		c.StockPath = "/stock"
	}
	return c
}

// SubmitOrder is the input of orders.submit and gateway.checkout.
type SubmitOrder struct {
	Item     string `json:"item"`
	Qty      int    `json:"qty"`
	Amount   int    `json:"amount"`
	Strategy string `json:"strategy"`
}

// Validate implements operations.Validator.
func (s *SubmitOrder) Validate() error {
	bad := func(field, msg string) error {
		return pipeline.NewError(pipeline.KindValidation, "ORDERS_VALIDATION_001", msg).WithDetail("field", field)
	}
	switch {
	case s.Item == "":
		return bad("item", "item must not be empty")
	case s.Qty <= 0:
		return bad("qty", "qty must be greater than 0")
	case s.Amount <= 0:
		return bad("amount", "amount must be greater than 0")
	}
	switch s.Strategy {
	case "", StrategyPropagate, StrategyFresh, StrategyReserve:
		return nil
	}
	return bad("strategy", fmt.Sprintf("strategy must be %q, %q or %q", StrategyPropagate, StrategyFresh, StrategyReserve))
}

// OrderResult is the output of orders.submit and gateway.checkout.
type OrderResult struct {
	ID            string `json:"id"`
	ReservationID string `json:"reservationId"`
	ChargeID      string `json:"chargeId"`
	Strategy      string `json:"strategy"`
}

// ReportQuery is the input of orders.report.
type ReportQuery struct {
	// Stream reads the body piece by piece as it arrives instead of all
	// at once.
	Stream bool `json:"stream" query:"stream"`
}

// Report is the output of orders.report.
type Report struct {
	Bytes int `json:"bytes"`
}

// StockCheck is the input of orders.stock.
type StockCheck struct {
	Item string `json:"item" query:"item"`
	// Reads is how many times the stock is read, with LocalWork between
	// reads (default 1).
	Reads int `json:"reads" query:"reads"`
}

// StockResult is the output of orders.stock.
type StockResult struct {
	Item      string `json:"item"`
	Available int    `json:"available"`
	Reads     int    `json:"reads"`
}

// Orders is the Orders service: it submits orders (reserve in Inventory
// over HTTP, then charge in Billing over gRPC), fetches Inventory's report
// and reads its stock with retries.
type Orders struct {
	cfg       OrdersConfig
	journal   *Journal
	inventory *jsonClient       // the stock reads' hand-written retries (experiment 2)
	inv       *inventoryClients // reserve and release; set by connect
	plain     *http.Client
	billing   BillingClient
	seq       counter
}

// NewOrders returns an Orders calling Inventory with the HTTP client hc
// (whose transport writes the deadline header) and Billing with billing.
func NewOrders(cfg OrdersConfig, journal *Journal, hc *http.Client, billing BillingClient) *Orders {
	cfg = cfg.withDefaults()
	return &Orders{
		cfg:       cfg,
		journal:   journal,
		inventory: &jsonClient{name: "inventory", base: cfg.Inventory, hc: hc},
		plain:     hc,
		billing:   billing,
	}
}

// Journal returns the service's event journal.
func (s *Orders) Journal() *Journal { return s.journal }

// connect makes Orders' typed clients, under the dependencies of its
// kernel k: "inventory" and "billing".
func (s *Orders) connect(k *kernel.Kernel) error {
	var err error
	s.inv, err = newInventoryClients(s.cfg.Inventory, s.plain.Transport, dependency(k, "inventory"))
	if err != nil {
		return err
	}
	if b, ok := s.billing.(*grpcBilling); ok {
		return b.under(dependency(k, "billing"))
	}
	return nil
}

// Register registers the Orders operations on reg.
func (s *Orders) Register(reg *operations.Registry) error {
	return firstErr(
		operations.Register(reg, operations.Descriptor{
			ID: "orders.submit", Summary: "Submit an order: reserve in Inventory, then charge in Billing.",
			Method: http.MethodPost, Path: "/orders", SuccessStatus: http.StatusCreated,
		}, s.Submit),
		operations.Register(reg, operations.Descriptor{
			ID: "orders.report", Summary: "Fetch Inventory's report (a body that drips).",
			Method: http.MethodGet, Path: "/report", Idempotent: true,
		}, s.Report),
		operations.Register(reg, operations.Descriptor{
			ID: "orders.stock", Summary: "Read Inventory's stock with retries, reads times with local work between.",
			Method: http.MethodGet, Path: "/stock", Idempotent: true,
		}, s.Stock),
	)
}

// Submit reserves stock in Inventory, then charges in Billing, giving each
// call time according to the strategy. When the charge fails, the
// reservation is released (a compensating step: a deadline stops work, it
// does not undo it).
func (s *Orders) Submit(ctx context.Context, in SubmitOrder) (OrderResult, error) {
	if in.Strategy == "" {
		in.Strategy = StrategyPropagate
	}
	id := s.orderID(ctx)
	s.journal.Record(ctx, "submit", "id", id, "strategy", in.Strategy)
	out := OrderResult{ID: id, Strategy: in.Strategy}

	var budget *outbound.Budget
	if in.Strategy == StrategyReserve {
		var err error
		budget, err = outbound.NewBudget(ctx, "orders.submit",
			outbound.WithMargin(s.cfg.Margin), outbound.WithCallCap(s.cfg.CallCap))
		if err != nil {
			return out, err
		}
	}
	reserveCtx, cancel, err := s.stepContext(ctx, in.Strategy, budget, s.cfg.ReserveForBilling, "inventory")
	if err != nil {
		return out, err
	}
	res, err := s.inv.reserve.Call(reserveCtx, Reserve{OrderID: id, Item: in.Item, Qty: in.Qty})
	cancel()
	if err != nil {
		s.journal.Record(ctx, "reserve-failed", "id", id, "code", pipeline.AsError(err).Code())
		return out, fmt.Errorf("orders: reserve: %w", err)
	}
	out.ReservationID = res.ID

	chargeCtx, cancel, err := s.stepContext(ctx, in.Strategy, budget, 0, "billing")
	if err == nil && s.cfg.IgnoreRetryMark {
		b := baggage.FromContext(chargeCtx).DeleteMember(propagation.BaggageRetried)
		chargeCtx = baggage.ContextWithBaggage(chargeCtx, b)
	}
	if err == nil {
		var rcpt Receipt
		rcpt, err = s.billing.Charge(chargeCtx, Charge{OrderID: id, Amount: in.Amount})
		out.ChargeID = rcpt.ID
		cancel()
	}
	if err != nil {
		s.journal.Record(ctx, "charge-failed", "id", id, "code", pipeline.AsError(err).Code())
		s.compensate(ctx, res.ID)
		return out, orderFailed(err, "billing", res.ID)
	}
	s.journal.Record(ctx, "submitted", "id", id, "chargeId", out.ChargeID)
	return out, nil
}

// orderID names a new order. A call with an idempotency key (the baggage
// its caller sent) is a retry of one order whichever attempt it is, so its
// ID comes from the key: the charge it sends Billing — same order, same
// amount, same key — is then the same request, and Billing replays the
// first attempt's charge instead of refusing a different input with 422.
func (s *Orders) orderID(ctx context.Context) string {
	if key := propagation.IdempotencyKey(ctx); key != "" {
		sum := sha256.Sum256([]byte(key))
		return "ord-" + hex.EncodeToString(sum[:6])
	}
	return "ord-" + strconv.FormatInt(s.seq.next(), 10)
}

// stepContext returns the context of one downstream call under the
// strategy. budget is StrategyReserve's, created by Submit from the
// invocation's context; reserve is the time it keeps back for the steps
// after this one.
func (s *Orders) stepContext(ctx context.Context, strategy string, budget *outbound.Budget, reserve time.Duration, dep string) (context.Context, context.CancelFunc, error) {
	switch strategy {
	case StrategyFresh:
		// The anti-pattern: a fresh timeout from nothing. The caller's
		// deadline and cancellation are gone.
		c, cancel := context.WithTimeout(context.Background(), s.cfg.FreshTimeout)
		return c, cancel, nil
	case StrategyReserve:
		return budget.Context(ctx, outbound.Call{Dependency: dep, Reserve: reserve})
	}
	return ctx, func() {}, nil // propagate: the handler's context as it is
}

// compensate releases a reservation after a failed charge. The caller's
// deadline is (nearly) spent by then, so the release runs detached from
// it, under a small budget of its own: compensation must not be cut by the
// very deadline that made it necessary.
func (s *Orders) compensate(ctx context.Context, reservation string) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if _, err := s.inv.release.Call(cctx, Release{ID: reservation}); err != nil {
		s.journal.Record(ctx, "compensation-failed", "reservationId", reservation, "code", pipeline.AsError(err).Code())
		return
	}
	s.journal.Record(ctx, "compensated", "reservationId", reservation)
}

// orderFailed wraps the failure of a downstream step as an Orders outcome
// of the same kind, naming the dependency and the released reservation,
// with the dependency's retry-after (a 409 from Billing while an earlier
// attempt's charge still runs says when to ask again).
func orderFailed(err error, dep, released string) error {
	pe := pipeline.AsError(err)
	kind, code := pe.Kind(), "ORDERS_UNAVAILABLE_001"
	switch kind {
	case pipeline.KindUnexpected, pipeline.KindCanceled:
		return err
	case pipeline.KindTimeout:
		code = "ORDERS_TIMEOUT_001"
	case pipeline.KindConflict:
		code = "ORDERS_CONFLICT_001"
	}
	out := pipeline.Wrap(kind, code, fmt.Sprintf("The order failed at %s (%s); its reservation was released.", dep, pe.Code()), err).
		WithDetail("dependency", dep).
		WithDetail("dependencyCode", pe.Code()).
		WithDetail("released", released)
	if d, ok := pe.RetryAfter(); ok {
		out = out.WithRetryAfter(d)
	}
	return out
}

// Report fetches Inventory's /report with the plain client. Its only
// timeout of its own is the per-read one, so without a deadline a body
// that drips a byte at a time takes as long as it likes; with one, the
// call ends at the deadline.
func (s *Orders) Report(ctx context.Context, in ReportQuery) (Report, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.cfg.Inventory+"/report", nil)
	if err != nil {
		return Report{}, err
	}
	resp, err := s.plain.Do(req)
	if err != nil {
		return Report{}, transportError("inventory", err)
	}
	defer resp.Body.Close()
	s.journal.Record(ctx, "report-headers", "status", strconv.Itoa(resp.StatusCode))
	if !in.Stream {
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			s.journal.Record(ctx, "report-cut", "bytes", strconv.Itoa(len(b)))
			return Report{Bytes: len(b)}, transportError("inventory", err)
		}
		return Report{Bytes: len(b)}, nil
	}
	var n int
	buf := make([]byte, 64)
	for {
		m, err := resp.Body.Read(buf)
		n += m
		if m > 0 {
			s.journal.Record(ctx, "report-chunk", "bytes", strconv.Itoa(n))
		}
		if errors.Is(err, io.EOF) {
			return Report{Bytes: n}, nil
		}
		if err != nil {
			s.journal.Record(ctx, "report-cut", "bytes", strconv.Itoa(n))
			return Report{Bytes: n}, transportError("inventory", err)
		}
	}
}

// Stock reads Inventory's stock in.Reads times, with LocalWork between
// reads; each read retries up to Attempts times. Every attempt, back-off
// and piece of local work spends the caller's one budget.
func (s *Orders) Stock(ctx context.Context, in StockCheck) (StockResult, error) {
	reads := max(in.Reads, 1)
	var st Stock
	for i := range reads {
		if i > 0 {
			if err := sleep(ctx, s.cfg.LocalWork); err != nil {
				return StockResult{}, err
			}
		}
		var err error
		if st, err = s.readStock(ctx, in.Item); err != nil {
			return StockResult{}, err
		}
	}
	return StockResult{Item: st.Item, Available: st.Available, Reads: reads}, nil
}

// readStock is one stock read with retries: each attempt is capped at
// AttemptTimeout and never outlives ctx; 5xx answers and timeouts of the
// attempt itself are retried after Backoff while ctx lasts.
func (s *Orders) readStock(ctx context.Context, item string) (Stock, error) {
	path := s.cfg.StockPath + "?item=" + url.QueryEscape(item)
	var last error
	for attempt := 1; attempt <= s.cfg.Attempts; attempt++ {
		if attempt > 1 {
			if err := sleep(ctx, s.cfg.Backoff); err != nil {
				return Stock{}, err
			}
		}
		actx, cancel := context.WithTimeout(ctx, s.cfg.AttemptTimeout)
		s.journal.Record(actx, "stock-attempt", "attempt", strconv.Itoa(attempt))
		var st Stock
		err := s.inventory.get(actx, path, &st)
		cancel()
		if err == nil {
			return st, nil
		}
		s.journal.Record(ctx, "stock-attempt-failed", "attempt", strconv.Itoa(attempt), "code", pipeline.AsError(err).Code())
		if ctx.Err() != nil {
			return Stock{}, ctx.Err() // the caller's budget is spent: no more attempts
		}
		if k := pipeline.AsError(err).Kind(); k != pipeline.KindUnavailable && k != pipeline.KindTimeout {
			return Stock{}, err
		}
		last = err
	}
	kind, code := pipeline.AsError(last).Kind(), "ORDERS_UNAVAILABLE_002"
	if kind == pipeline.KindTimeout {
		code = "ORDERS_TIMEOUT_002"
	}
	return Stock{}, pipeline.Wrap(kind, code,
		fmt.Sprintf("Inventory's stock did not answer in %d attempts.", s.cfg.Attempts), last).
		WithDetail("attempts", s.cfg.Attempts)
}

// sleep waits d or until ctx ends, whichever is first.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
