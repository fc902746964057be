package limiter

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience/internal/limited"
)

// ConcurrencyLimiter is resilience.ConcurrencyLimiter (see its contract).
// Inside an operation's resilience.Limits it also orders calls by their
// class (pipeline.Invocation.Priority). Waiters of a higher class go
// first. A full queue evicts its newest waiter of the lowest class for an
// arrival of a higher one. Calls below the operation's class may not take
// the reserved part of the limit (Policy.PriorityReserve). See TakeFree,
// AcquireClass and SetPriority. Acquire, TryAcquire and Release treat
// every call alike. The uncontended path is a few atomic operations. The
// queue is touched only when every slot is taken.
type ConcurrencyLimiter struct {
	limit      atomic.Int64 // changed in place by a reload (SetLimitsUnchecked)
	queueLimit atomic.Int64

	inFlight atomic.Int64 // slots held, including those handed to waiters
	// Every call writes inFlight twice but only reads waiting: apart, the
	// reads hit a line that cores share instead of one another core wrote.
	_       [64]byte
	waiting atomic.Int64 // len(queue), readable without mu

	// class is the operation's class; calls below it may use the limit
	// but for reserve thousandths of it (rounded down to whole slots).
	class   atomic.Int32
	reserve atomic.Int64

	mu    sync.Mutex    // guards queue
	queue []*slotWaiter // by class, highest first; oldest first within one
}

// slotWaiter is one call waiting for a slot. ready is closed (under mu)
// when the slot is handed over.
type slotWaiter struct {
	ready    chan struct{}
	class    pipeline.Priority
	granted  bool // guarded by ConcurrencyLimiter.mu
	rejected bool // set before ready is closed: a reload shortened the queue, or a higher class evicted it
}

// Init makes l, a zero ConcurrencyLimiter not yet in use, a limiter of
// limit slots with up to queueLimit calls waiting. So
// resilience.ConcurrencyLimiter can hold one by value, and its zero value
// turns every call away. Init fails when limit is not positive or
// queueLimit is negative.
func (l *ConcurrencyLimiter) Init(limit, queueLimit int) error {
	if limit <= 0 || queueLimit < 0 {
		return fmt.Errorf("resilience: NewConcurrencyLimiter(%d, %d): want a positive limit and a non-negative queue", limit, queueLimit)
	}
	l.limit.Store(int64(limit))
	l.queueLimit.Store(int64(queueLimit))
	return nil
}

// NewSlots returns a limiter of limit slots with up to queueLimit calls
// waiting, for arguments the caller checked (as Init does).
func NewSlots(limit, queueLimit int) *ConcurrencyLimiter {
	l := &ConcurrencyLimiter{}
	l.limit.Store(int64(limit))
	l.queueLimit.Store(int64(queueLimit))
	return l
}

// TryAcquire takes a free slot if there is one and nobody is waiting for
// one. It never waits. To queue instead, use Acquire.
func (l *ConcurrencyLimiter) TryAcquire() bool {
	return l.TakeFree(pipeline.PriorityDefault)
}

// TakeFree takes a slot for a call of class c at once when one is free
// and nobody waits for one. Waiters go first. It reports whether it took
// one.
func (l *ConcurrencyLimiter) TakeFree(c pipeline.Priority) bool {
	return l.waiting.Load() == 0 && l.tryTake(c)
}

// Acquire takes a slot, waiting behind earlier callers when all are taken
// and the queue has room. It returns nil when the caller holds a slot.
//
// It returns resilience.ErrLimited at once when every slot and queue
// place is taken. It returns ctx.Err() when ctx is done on arrival or ends
// during the wait. The caller then holds nothing, and its queue place is
// given back. A slot handed over just as ctx ended goes to the next
// waiter.
func (l *ConcurrencyLimiter) Acquire(ctx context.Context) error {
	return l.AcquireClass(ctx, pipeline.PriorityDefault)
}

// AcquireClass is Acquire for a call of class c. It goes ahead of every
// waiter of a lower class. When the queue is full, it takes the place of
// the newest waiter of the lowest class below c. That waiter is turned
// away with resilience.ErrLimited.
func (l *ConcurrencyLimiter) AcquireClass(ctx context.Context, c pipeline.Priority) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if l.TakeFree(c) {
		return nil
	}
	l.mu.Lock()
	// Nobody of c's class or above waits: a free slot is c's (slots
	// freed since the check above, or reserved ones lower waiters
	// may not take).
	if (len(l.queue) == 0 || l.queue[0].class < c) && l.tryTake(c) {
		l.mu.Unlock()
		return nil
	}
	if int64(len(l.queue)) >= l.queueLimit.Load() {
		n := len(l.queue)
		if n == 0 || l.queue[n-1].class >= c {
			l.mu.Unlock()
			return limited.ErrLimited
		}
		l.turnAway(n - 1)
	}
	w := &slotWaiter{ready: make(chan struct{}), class: c}
	i := len(l.queue)
	for i > 0 && l.queue[i-1].class < c {
		i--
	}
	l.queue = slices.Insert(l.queue, i, w)
	l.waiting.Add(1)
	l.dispatch()
	l.mu.Unlock()

	select {
	case <-w.ready:
		if w.rejected {
			return limited.ErrLimited
		}
		return nil
	case <-ctx.Done():
	}
	l.mu.Lock()
	granted := w.granted
	if !granted {
		l.remove(w)
	}
	l.mu.Unlock()
	if granted {
		l.Release()
	}
	return ctx.Err()
}

// Release gives a slot back, handing it to the oldest waiter if there is
// one.
func (l *ConcurrencyLimiter) Release() {
	l.inFlight.Add(-1)
	// A waiter that queued after our decrement saw the free slot itself
	// (it stores waiting, then tries inFlight; we store inFlight, then
	// load waiting): one of us hands it over.
	if l.waiting.Load() == 0 {
		return
	}
	l.mu.Lock()
	l.dispatch()
	l.mu.Unlock()
}

// dispatch hands free slots to waiters, highest class first, oldest
// first within a class. l.mu is held.
func (l *ConcurrencyLimiter) dispatch() {
	for len(l.queue) > 0 && l.tryTake(l.queue[0].class) {
		w := l.queue[0]
		l.queue[0] = nil
		l.queue = l.queue[1:]
		l.waiting.Add(-1)
		w.granted = true
		close(w.ready)
	}
	if len(l.queue) == 0 {
		l.queue = nil // let the backing array go once drained
	}
}

// tryTake increments inFlight if it is below the limit of class c.
func (l *ConcurrencyLimiter) tryTake(c pipeline.Priority) bool {
	for {
		n := l.inFlight.Load()
		if n >= l.capacity(c) {
			return false
		}
		if l.inFlight.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// capacity returns the slots calls of class c may hold: the limit, less
// the reserve for a class below the operation's.
func (l *ConcurrencyLimiter) capacity(c pipeline.Priority) int64 {
	n := l.limit.Load()
	if int32(c) < l.class.Load() {
		n -= n * l.reserve.Load() / 1000
	}
	return n
}

// turnAway takes the waiter at i out of the queue and turns it away with
// resilience.ErrLimited. l.mu is held.
func (l *ConcurrencyLimiter) turnAway(i int) {
	w := l.queue[i]
	l.queue = slices.Delete(l.queue, i, i+1)
	l.waiting.Add(-1)
	w.rejected = true
	close(w.ready)
}

// SetPriority sets the operation's class and the thousandths of the limit
// reserved for it (a reload), handing out the slots a smaller reserve
// frees.
func (l *ConcurrencyLimiter) SetPriority(class pipeline.Priority, reserve int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.class.Store(int32(class))
	l.reserve.Store(reserve)
	l.dispatch()
}

// remove deletes w from the queue. l.mu is held.
func (l *ConcurrencyLimiter) remove(w *slotWaiter) {
	for i, q := range l.queue {
		if q == w {
			l.queue = append(l.queue[:i], l.queue[i+1:]...)
			l.waiting.Add(-1)
			return
		}
	}
}

// InFlight returns the number of slots held.
func (l *ConcurrencyLimiter) InFlight() int { return int(l.inFlight.Load()) }

// QueueDepth returns the number of calls waiting for a slot.
func (l *ConcurrencyLimiter) QueueDepth() int { return int(l.waiting.Load()) }

// SetLimitsUnchecked changes the limit and the queue in place (a reload).
// The slots held stay held. With a lower limit, nobody is admitted until
// fewer than limit are in flight. With a higher one, waiters are admitted
// at once, oldest first. When more calls wait than the new queue holds,
// the newest of the lowest class are turned away with
// resilience.ErrLimited.
func (l *ConcurrencyLimiter) SetLimitsUnchecked(limit, queueLimit int) {
	l.limit.Store(int64(limit))
	l.mu.Lock()
	defer l.mu.Unlock()
	l.queueLimit.Store(int64(queueLimit))
	for len(l.queue) > queueLimit {
		l.turnAway(len(l.queue) - 1) // the newest of the lowest class
	}
	l.dispatch()
}

// SetLimit changes the limit in place, as an adaptive controller does.
// The slots held stay held. With a higher limit, waiters are admitted at
// once, oldest first.
func (l *ConcurrencyLimiter) SetLimit(limit int) {
	if l.limit.Swap(int64(limit)) < int64(limit) && l.waiting.Load() > 0 {
		l.mu.Lock()
		l.dispatch()
		l.mu.Unlock()
	}
}

// Limits returns the limit and the queue.
func (l *ConcurrencyLimiter) Limits() (limit, queueLimit int) {
	return int(l.limit.Load()), int(l.queueLimit.Load())
}

// Class returns the operation's class (SetPriority).
func (l *ConcurrencyLimiter) Class() pipeline.Priority { return pipeline.Priority(l.class.Load()) }
