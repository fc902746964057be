package asynclog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultQueue is the number of records a Handler holds for its writer
// goroutine unless [WithQueue] says otherwise.
const DefaultQueue = 4096

// DefaultReportInterval is how often, at most, a Handler whose queue does
// not drain reports drops, unless [WithReportInterval] says otherwise.
const DefaultReportInterval = time.Second

var (
	// ErrDropped is returned by Handle when the queue was full and the
	// record was dropped (and counted).
	ErrDropped = errors.New("asynclog: queue full, record dropped")
	// ErrClosed is returned by Handle after Close: the record was dropped
	// (and counted).
	ErrClosed = errors.New("asynclog: handler closed, record dropped")
)

// An Option configures [New].
type Option func(*config)

type config struct {
	queue    int
	interval time.Duration
	flush    func() error
	wait     time.Duration
}

// WithQueue sets how many records may wait for the writer goroutine
// (DefaultQueue if n < 1).
func WithQueue(n int) Option {
	return func(c *config) {
		if n >= 1 {
			c.queue = n
		}
	}
}

// WithReportInterval sets how long, at most, the writer goroutine waits
// before reporting drops while its queue does not drain
// (DefaultReportInterval if d <= 0). Drops are always reported when the
// queue drains.
func WithReportInterval(d time.Duration) Option {
	return func(c *config) {
		if d > 0 {
			c.interval = d
		}
	}
}

// WithFlush sets f, which the writer goroutine calls once its queue is
// empty after it wrote records, at most once every wait, and before it
// stops. A wrapped handler that writes into a [Batch] then writes the
// records of a burst at once. A record after a quiet wait goes out at
// once; one soon after the last flush waits for the rest of wait.
func WithFlush(f func() error, wait time.Duration) Option {
	return func(c *config) { c.flush, c.wait = f, wait }
}

// Handler is a [slog.Handler] that writes records through another handler
// on a background goroutine and never blocks the caller. See the package
// documentation. Its methods are safe for concurrent use.
type Handler struct {
	h slog.Handler // the wrapped handler, with this handler's attrs and groups
	c *core        // shared by the whole tree
}

var _ slog.Handler = (*Handler)(nil)

type item struct {
	ctx context.Context
	h   slog.Handler
	r   slog.Record
}

// core is the state shared by a handler tree: the queue, the writer
// goroutine, the counters.
type core struct {
	root     slog.Handler
	interval time.Duration
	flush    func() error // nil: none
	wait     time.Duration
	// The writer goroutine's: records handled since the last flush, when
	// it ended, and the timer of the next.
	pending  uint64
	flushed  time.Time
	flushT   *time.Timer
	flushDue bool

	mu     sync.RWMutex // Handle holds it shared while it sends; Close exclusively while it closes queue
	closed bool
	queue  chan item

	dropped  atomic.Uint64
	abandon  atomic.Bool   // set when a Close's context ended: skip what is left
	done     chan struct{} // closed when the writer goroutine returns
	closeOne sync.Once
}

// New returns a Handler that writes through h on its own goroutine. Call
// [Handler.Close] to flush and stop it.
func New(h slog.Handler, opts ...Option) *Handler {
	cfg := config{queue: DefaultQueue, interval: DefaultReportInterval}
	for _, o := range opts {
		o(&cfg)
	}
	c := &core{
		root:     h,
		interval: cfg.interval,
		flush:    cfg.flush,
		wait:     cfg.wait,
		queue:    make(chan item, cfg.queue),
		done:     make(chan struct{}),
	}
	go c.run()
	return &Handler{h: h, c: c}
}

// Enabled reports whether the wrapped handler handles records at level.
func (h *Handler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.h.Enabled(ctx, level)
}

// Handle queues a clone of r for the writer goroutine and returns at once.
// If the queue is full it drops r, counts it and returns [ErrDropped];
// after Close it does the same and returns [ErrClosed].
func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	if ctx.Done() != nil {
		ctx = context.WithoutCancel(ctx)
	}
	it := item{ctx: ctx, h: h.h, r: r.Clone()}
	c := h.c
	c.mu.RLock()
	if c.closed {
		c.mu.RUnlock()
		c.dropped.Add(1)
		return ErrClosed
	}
	select {
	case c.queue <- it:
		c.mu.RUnlock()
		return nil
	default:
		c.mu.RUnlock()
		c.dropped.Add(1)
		return ErrDropped
	}
}

// WithAttrs returns a Handler of the same tree (same queue, same order)
// whose records carry attrs.
func (h *Handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	if len(attrs) == 0 {
		return h
	}
	return &Handler{h: h.h.WithAttrs(attrs), c: h.c}
}

// WithGroup returns a Handler of the same tree (same queue, same order)
// whose later attributes are in group name.
func (h *Handler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	return &Handler{h: h.h.WithGroup(name), c: h.c}
}

// Dropped returns how many records the tree dropped so far: the queue was
// full, the handler was closed, or a Close's context ended before they were
// written.
func (h *Handler) Dropped() uint64 { return h.c.dropped.Load() }

// Close stops the tree accepting records, waits until the queued records
// and the final drop report are written, and stops the writer goroutine.
// If ctx ends first it returns ctx.Err(); the records still queued are then
// dropped and counted, and the goroutine exits once the write in progress
// returns. Close may be called again (from any handler of the tree) to wait
// for that. It returns nil once the goroutine has stopped.
func (h *Handler) Close(ctx context.Context) error {
	c := h.c
	c.closeOne.Do(func() {
		c.mu.Lock()
		c.closed = true
		close(c.queue)
		c.mu.Unlock()
	})
	select {
	case <-c.done:
		return nil
	default:
	}
	select {
	case <-c.done:
		return nil
	case <-ctx.Done():
		c.abandon.Store(true)
		return ctx.Err()
	}
}

// run is the writer goroutine.
func (c *core) run() {
	defer close(c.done)
	var reported uint64
	last := time.Now()
	report := func(force bool) {
		d := c.dropped.Load()
		if d == reported || c.abandon.Load() {
			return
		}
		if !force && len(c.queue) > 0 && time.Since(last) < c.interval {
			return
		}
		n := d - reported
		reported, last = d, time.Now()
		ctx := context.Background()
		if !c.root.Enabled(ctx, slog.LevelWarn) {
			return
		}
		r := slog.NewRecord(time.Now(), slog.LevelWarn, fmt.Sprintf("asynclog: dropped %d records", n), 0)
		r.AddAttrs(slog.Uint64("dropped", n))
		_ = c.root.Handle(ctx, r)
		c.pending++
	}
	tick := time.NewTicker(c.interval)
	defer tick.Stop()
	c.flushT = time.NewTimer(time.Hour)
	c.flushT.Stop()
	defer c.flushT.Stop()
	for {
		select {
		case it, ok := <-c.queue:
			if !ok {
				report(true)
				c.flushPending()
				return
			}
			if c.abandon.Load() {
				c.dropped.Add(1)
				continue
			}
			_ = it.h.Handle(it.ctx, it.r)
			c.pending++
			report(false)
			if len(c.queue) == 0 {
				c.flushSoon()
			}
		case <-tick.C:
			// A drop counted just after the queue drained is reported
			// here rather than with the next record.
			report(true)
			c.flushSoon()
		case <-c.flushT.C:
			c.flushDue = false
			c.flushPending()
		}
	}
}

// flushSoon flushes now if the last flush is wait ago, else once it is.
func (c *core) flushSoon() {
	if c.flush == nil || c.pending == 0 || c.flushDue {
		return
	}
	if d := c.wait - time.Since(c.flushed); d > 0 {
		c.flushT.Reset(d)
		c.flushDue = true
		return
	}
	c.flushPending()
}

// flushPending calls the flush function, if there is one and records were
// handled since it last ran. After a Close whose context ended, the records
// not yet flushed are dropped and counted instead.
func (c *core) flushPending() {
	if c.flush == nil || c.pending == 0 {
		return
	}
	if c.abandon.Load() {
		c.dropped.Add(c.pending)
	} else {
		_ = c.flush()
	}
	c.pending, c.flushed = 0, time.Now()
}
