package main

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
)

// BillingConfig configures the Billing role.
type BillingConfig struct {
	// ChargeWork is how long a charge takes (default 1.5 s).
	ChargeWork time.Duration
	// SwallowCancel makes billing.slow ignore its context: the failure
	// mode experiment 7 detects.
	SwallowCancel bool
	// Committed models a payment processor that cannot be recalled: a
	// charge, once started, completes ChargeWork later even when the
	// call's deadline fires first (Billing answers DeadlineExceeded at the
	// deadline, and the card is charged anyway). There is no refusal
	// check: the processor's latency is not known in advance. Experiment 8
	// retries such a charge with an idempotency key.
	Committed bool
	// Outage makes every charge fail at once with UNAVAILABLE
	// (BILLING_UNAVAILABLE_001), recorded as an "outage" event: the dead
	// dependency of experiment 9.
	Outage bool
}

func (c BillingConfig) withDefaults() BillingConfig {
	if c.ChargeWork <= 0 {
		c.ChargeWork = 1500 * time.Millisecond
	}
	return c
}

// Charge is the input of billing.charge.
type Charge struct {
	OrderID string `json:"orderId"`
	Amount  int    `json:"amount"`
}

// Validate implements operations.Validator.
func (c *Charge) Validate() error {
	if c.Amount <= 0 {
		return pipeline.NewError(pipeline.KindValidation, "BILLING_VALIDATION_001", "amount must be greater than 0").WithDetail("field", "amount")
	}
	return nil
}

// Receipt is the output of billing.charge.
type Receipt struct {
	ID      string `json:"id"`
	OrderID string `json:"orderId"`
	Amount  int    `json:"amount"`
}

// Billing is the Billing service, served over gRPC: a charge that refuses
// to start when it cannot finish before the caller's deadline, and a slow
// operation for the cancellation experiment.
type Billing struct {
	cfg     BillingConfig
	journal *Journal

	mu      sync.Mutex // guards charges
	charges []Receipt
}

// NewBilling returns a Billing recording into journal.
func NewBilling(cfg BillingConfig, journal *Journal) *Billing {
	return &Billing{cfg: cfg.withDefaults(), journal: journal}
}

// Journal returns the service's event journal.
func (s *Billing) Journal() *Journal { return s.journal }

// Charges returns the charges made so far.
func (s *Billing) Charges() []Receipt {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Receipt(nil), s.charges...)
}

// Register registers the Billing operations on reg.
func (s *Billing) Register(reg *operations.Registry) error {
	return firstErr(
		operations.Register(reg, operations.Descriptor{
			ID: "billing.charge", Summary: "Charge an order; refuses with DeadlineExceeded when the deadline leaves too little time.",
		}, s.Charge),
		operations.Register(reg, operations.Descriptor{
			ID: "billing.slow", Summary: "Work for delayMs milliseconds, stopping when the call is cancelled.", Idempotent: true,
		}, s.Slow),
	)
}

// Charge charges an order. It refuses before starting (TIMEOUT, gRPC
// DeadlineExceeded) when the call's deadline leaves less than ChargeWork,
// and charges nothing when the call ends mid-work — unless the service is
// Committed: then every charge that starts completes, and returns its
// receipt even after the deadline (the kernel has answered the caller
// DeadlineExceeded by then; with an idempotency key, billing.charge's
// record holds this receipt for the caller's retry).
func (s *Billing) Charge(ctx context.Context, in Charge) (Receipt, error) {
	if s.cfg.Outage {
		s.journal.Record(ctx, "outage", "orderId", in.OrderID)
		return Receipt{}, pipeline.NewError(pipeline.KindUnavailable, "BILLING_UNAVAILABLE_001", "billing is down")
	}
	if s.cfg.Committed {
		s.journal.Record(ctx, "started", "what", "charge")
		time.Sleep(s.cfg.ChargeWork) // the processor: not stopped by ctx
		s.journal.Record(ctx, "finished", "what", "charge", "ctxErr", pipeline.ErrorText(ctx.Err()))
	} else {
		if err := refuseIfShort(ctx, s.journal, "BILLING_TIMEOUT_001", "charge", s.cfg.ChargeWork); err != nil {
			return Receipt{}, err
		}
		if err := work(ctx, s.journal, "charge", s.cfg.ChargeWork, false); err != nil {
			return Receipt{}, err
		}
	}
	s.mu.Lock()
	r := Receipt{ID: "chg-" + strconv.Itoa(len(s.charges)+1), OrderID: in.OrderID, Amount: in.Amount}
	s.charges = append(s.charges, r)
	s.mu.Unlock()
	s.journal.Record(ctx, "charged", "id", r.ID, "orderId", r.OrderID)
	return r, nil
}

// Slow works for DelayMs, stopping when the call is cancelled — unless the
// service was built with SwallowCancel.
func (s *Billing) Slow(ctx context.Context, in Slow) (SlowDone, error) {
	if err := work(ctx, s.journal, "slow", time.Duration(in.DelayMs)*time.Millisecond, s.cfg.SwallowCancel); err != nil {
		return SlowDone{}, err
	}
	return SlowDone{Service: "billing", DelayMs: in.DelayMs}, nil
}
