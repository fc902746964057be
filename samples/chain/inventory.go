package main

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sundial-go/sundial/adapters/httpadapter"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
)

// InventoryConfig configures the Inventory role.
type InventoryConfig struct {
	// ReserveWork is how long a reservation takes (default 1.5 s).
	ReserveWork time.Duration
	// StockFailures is how many stock reads answer 503 before the first
	// success (experiment 5 uses 1).
	StockFailures int
	// StockDelay, when positive, is how long a stock read works before it
	// answers (stopping when its call is cancelled): the slow replica of
	// experiment 10.
	StockDelay time.Duration
	// DripBytes and DripInterval shape GET /report: headers at once, then
	// one body byte every DripInterval (defaults 8 and 500 ms).
	DripBytes    int
	DripInterval time.Duration
}

func (c InventoryConfig) withDefaults() InventoryConfig {
	if c.ReserveWork <= 0 {
		c.ReserveWork = 1500 * time.Millisecond
	}
	if c.DripBytes <= 0 {
		c.DripBytes = 8
	}
	if c.DripInterval <= 0 {
		c.DripInterval = 500 * time.Millisecond
	}
	return c
}

// Reserve is the input of inventory.reserve.
type Reserve struct {
	OrderID string `json:"orderId"`
	Item    string `json:"item"`
	Qty     int    `json:"qty"`
}

// Validate implements operations.Validator.
func (r *Reserve) Validate() error {
	switch {
	case r.Item == "":
		return pipeline.NewError(pipeline.KindValidation, "INVENTORY_VALIDATION_001", "item must not be empty").WithDetail("field", "item")
	case r.Qty <= 0:
		return pipeline.NewError(pipeline.KindValidation, "INVENTORY_VALIDATION_001", "qty must be greater than 0").WithDetail("field", "qty")
	}
	return nil
}

// Reservation is the output of inventory.reserve.
type Reservation struct {
	ID      string `json:"id"`
	OrderID string `json:"orderId"`
	Item    string `json:"item"`
	Qty     int    `json:"qty"`
}

// Release is the input of inventory.release, the compensating step of
// inventory.reserve.
type Release struct {
	ID string `json:"id"`
}

// Released is the output of inventory.release.
type Released struct {
	ID string `json:"id"`
}

// StockQuery is the input of inventory.stock.
type StockQuery struct {
	Item string `json:"item" query:"item"`
}

// Stock is the output of inventory.stock.
type Stock struct {
	Item      string `json:"item"`
	Available int    `json:"available"`
}

// Inventory is the Inventory service: reservations with a compensating
// release, a stock read that can fail on purpose, a slow operation for the
// cancellation experiment, and two misbehaving host endpoints (a drip and
// a silent one) for the client-timeout experiments.
type Inventory struct {
	cfg     InventoryConfig
	journal *Journal

	mu       sync.Mutex // guards reserved, next and stockReads
	reserved map[string]Reservation
	next     int
	reads    int
}

// NewInventory returns an Inventory recording into journal.
func NewInventory(cfg InventoryConfig, journal *Journal) *Inventory {
	return &Inventory{cfg: cfg.withDefaults(), journal: journal, reserved: make(map[string]Reservation)}
}

// Journal returns the service's event journal.
func (s *Inventory) Journal() *Journal { return s.journal }

// Active returns the reservations currently held (not released).
func (s *Inventory) Active() []Reservation {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Reservation, 0, len(s.reserved))
	for _, r := range s.reserved {
		out = append(out, r)
	}
	return out
}

// Register registers the Inventory operations on reg.
func (s *Inventory) Register(reg *operations.Registry) error {
	return firstErr(
		operations.Register(reg, operations.Descriptor{
			ID: "inventory.reserve", Summary: "Reserve stock for an order; refuses when the deadline leaves too little time.",
			Method: http.MethodPost, Path: "/reserve", SuccessStatus: http.StatusOK,
		}, s.Reserve),
		operations.Register(reg, operations.Descriptor{
			ID: "inventory.release", Summary: "Release a reservation (the compensating step of inventory.reserve).",
			Method: http.MethodPost, Path: "/release", Idempotent: true,
		}, s.Release),
		operations.Register(reg, operations.Descriptor{
			ID: "inventory.stock", Summary: "Read the stock of an item; the first StockFailures reads answer 503.",
			Method: http.MethodGet, Path: "/stock", Idempotent: true,
		}, s.Stock),
		operations.Register(reg, operations.Descriptor{
			ID: "inventory.slow", Summary: "Work for delayMs milliseconds, stopping when the call is cancelled.",
			Method: http.MethodGet, Path: "/slow", Idempotent: true,
		}, s.Slow),
	)
}

// Reserve holds stock for an order. It refuses before starting when the
// call's deadline leaves less than ReserveWork, and reserves nothing when
// the call ends mid-work.
func (s *Inventory) Reserve(ctx context.Context, in Reserve) (Reservation, error) {
	if err := refuseIfShort(ctx, s.journal, "INVENTORY_TIMEOUT_001", "reserve", s.cfg.ReserveWork); err != nil {
		return Reservation{}, err
	}
	if err := work(ctx, s.journal, "reserve", s.cfg.ReserveWork, false); err != nil {
		return Reservation{}, err
	}
	s.mu.Lock()
	s.next++
	r := Reservation{ID: "res-" + strconv.Itoa(s.next), OrderID: in.OrderID, Item: in.Item, Qty: in.Qty}
	s.reserved[r.ID] = r
	s.mu.Unlock()
	s.journal.Record(ctx, "reserved", "id", r.ID, "orderId", r.OrderID)
	return r, nil
}

// Release drops a reservation. Releasing an unknown or already released
// reservation is NOT_FOUND.
func (s *Inventory) Release(ctx context.Context, in Release) (Released, error) {
	s.mu.Lock()
	_, ok := s.reserved[in.ID]
	delete(s.reserved, in.ID)
	s.mu.Unlock()
	if !ok {
		return Released{}, pipeline.NewError(pipeline.KindNotFound, "INVENTORY_NOT_FOUND_001", fmt.Sprintf("Reservation '%s' does not exist.", in.ID)).WithDetail("id", in.ID)
	}
	s.journal.Record(ctx, "released", "id", in.ID)
	return Released{ID: in.ID}, nil
}

// Stock answers the stock of an item. The first StockFailures reads are
// UNAVAILABLE (503), as a dependency that is briefly overloaded.
func (s *Inventory) Stock(ctx context.Context, in StockQuery) (Stock, error) {
	s.mu.Lock()
	s.reads++
	n := s.reads
	s.mu.Unlock()
	if n <= s.cfg.StockFailures {
		s.journal.Record(ctx, "stock-unavailable", "read", strconv.Itoa(n))
		return Stock{}, pipeline.NewError(pipeline.KindUnavailable, "INVENTORY_UNAVAILABLE_001", "The stock service is briefly overloaded.")
	}
	if s.cfg.StockDelay > 0 {
		if err := work(ctx, s.journal, "stock", s.cfg.StockDelay, false); err != nil {
			return Stock{}, err
		}
	}
	s.journal.Record(ctx, "stock-read", "read", strconv.Itoa(n))
	return Stock{Item: in.Item, Available: 42}, nil
}

// Slow works for DelayMs, stopping when the call is cancelled.
func (s *Inventory) Slow(ctx context.Context, in Slow) (SlowDone, error) {
	if err := work(ctx, s.journal, "slow", time.Duration(in.DelayMs)*time.Millisecond, false); err != nil {
		return SlowDone{}, err
	}
	return SlowDone{Service: "inventory", DelayMs: in.DelayMs}, nil
}

// Routes adds Inventory's misbehaving host endpoints to e: GET /report
// drips its body (experiment 1) and GET /silent never answers
// (experiment 2). They are plain echo routes, not operations: they model a
// dependency that does not play by the rules. It also records the deadline
// headers of every request that carries them (experiment 5 reads them).
func (s *Inventory) Routes(e *echo.Echo) {
	e.Use(s.recordArrival)
	e.GET("/report", s.drip)
	e.GET("/silent", s.silent)
}

// recordArrival records an "arrival" event with the raw deadline headers
// of a request that carries them: what the caller said was left.
func (s *Inventory) recordArrival(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		h := c.Request().Header
		abs, rel := h.Get(httpadapter.HeaderDeadline), h.Get(httpadapter.DefaultRelativeDeadlineHeader)
		if abs != "" || rel != "" {
			s.journal.Record(c.Request().Context(), "arrival", "path", c.Request().URL.Path, "timeoutMs", rel, "deadline", abs)
		}
		return next(c)
	}
}

// drip sends the headers at once, then one body byte every DripInterval.
func (s *Inventory) drip(c echo.Context) error {
	ctx := c.Request().Context()
	w := c.Response()
	w.Header().Set(echo.HeaderContentType, echo.MIMETextPlain)
	w.Header().Set(echo.HeaderContentLength, strconv.Itoa(s.cfg.DripBytes))
	w.WriteHeader(http.StatusOK)
	w.Flush()
	s.journal.Record(ctx, "drip-headers")
	t := time.NewTicker(s.cfg.DripInterval)
	defer t.Stop()
	for sent := 0; sent < s.cfg.DripBytes; sent++ {
		select {
		case <-ctx.Done():
			s.journal.Record(ctx, "drip-abandoned", "sent", strconv.Itoa(sent))
			return nil
		case <-t.C:
		}
		if _, err := w.Write([]byte{'x'}); err != nil {
			s.journal.Record(ctx, "drip-abandoned", "sent", strconv.Itoa(sent))
			return nil
		}
		w.Flush()
	}
	s.journal.Record(ctx, "drip-finished", "sent", strconv.Itoa(s.cfg.DripBytes))
	return nil
}

// silent accepts the request and says nothing until the client leaves.
func (s *Inventory) silent(c echo.Context) error {
	ctx := c.Request().Context()
	s.journal.Record(ctx, "silent-accepted")
	<-ctx.Done()
	s.journal.Record(ctx, "silent-abandoned")
	return nil
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
