package outbound

import (
	"context"
	"time"
)

// hedged runs a call whose attempts may overlap. Each hedge delay without an
// answer starts another attempt, while attempts, budget and deadline allow.
// The delay is HedgeDelay, or the HedgeQuantile of recent latency. The first
// final answer ends the call: a success, or an outcome not to retry. The
// other attempts are cancelled, and hedged returns once they have returned. A
// retryable failure while others run waits for them. With none running, it is
// retried after a backoff, as a sequential call would be.
func (c *call) hedged(attempt func(context.Context) error) error {
	h := &hedging{c: c, attempt: attempt, results: make(chan result, c.s.p.Attempts), winner: -1}
	defer h.stop()
	if err := h.launch(false); err != nil {
		return err
	}
	delay := c.s.p.HedgeDelay
	if c.s.p.HedgeQuantile > 0 {
		delay = c.d.lat.delay(delay)
	}
	timer := time.NewTimer(delay)
	defer timer.Stop()
	for {
		select {
		case r := <-h.results:
			h.inflight--
			err := r.err
			if err == nil {
				h.winner = r.i
				return nil
			}
			if !c.final(err) && h.inflight > 0 {
				continue // the others may still answer
			}
			if h.inflight > 0 || !c.again(err) || h.launch(false) != nil {
				return err
			}
			timer.Reset(delay)
		case <-timer.C:
			if c.n < c.s.p.Attempts && c.fits(time.Now()) && c.withdraw(true) && h.launch(true) == nil {
				timer.Reset(delay)
			}
		}
	}
}

// hedging is the state of one hedged call.
type hedging struct {
	c        *call
	attempt  func(context.Context) error
	results  chan result // buffered for every attempt: none blocks on sending
	cancels  []context.CancelFunc
	inflight int
	winner   int // index in cancels of the attempt whose success ends the call, or -1
}

// result is an attempt's outcome and its index in cancels.
type result struct {
	err error
	i   int
}

// launch starts the next attempt in a goroutine, or returns the breaker's
// refusal.
func (h *hedging) launch(hedge bool) error {
	t, err := h.c.admit()
	if err != nil {
		return err
	}
	actx, cancel := context.WithCancel(h.c.ctx)
	h.cancels = append(h.cancels, cancel)
	h.inflight++
	n, i := h.c.n, len(h.cancels)-1
	go func() { h.results <- result{h.c.run(h.attempt, n, hedge, actx, t), i} }()
	return nil
}

// stop cancels the attempts other than the winner and waits for those
// still running to return. The winner's context stays live for its
// caller (it ends with the call's).
func (h *hedging) stop() {
	for i, cancel := range h.cancels {
		if i != h.winner {
			cancel()
		}
	}
	for ; h.inflight > 0; h.inflight-- {
		<-h.results
	}
}
