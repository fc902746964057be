package outbound

import "sync/atomic"

// maxBudgetMin bounds Policy.BudgetMin.
const maxBudgetMin = 1_000_000

// milli is the budget's fixed-point unit: one token is 1000.
const milli = 1000

// budget is a dependency's retry budget: a token bucket shared by retries and
// hedges. Every first attempt deposits ratio of a token. Every retry or hedge
// withdraws a whole one. The bucket holds at most capacity tokens, and it
// starts full. So over any run of calls, the retries and hedges sent are at
// most ratio × calls + capacity. With 0.2, a downstream outage costs the
// dependency at most 1.2× its normal load, plus the reserve. One atomic word
// holds it, and it reads no clock. Its reserve is refilled by traffic, not by
// time. So a dependency that is not called earns nothing: a quiet client gets
// only the reserve.
type budget struct {
	ratio    int64 // milli-tokens deposited per first attempt
	capacity int64 // milli-tokens
	balance  atomic.Int64
}

func newBudget(ratio float64, minTokens int) *budget {
	b := &budget{ratio: int64(ratio * milli), capacity: int64(minTokens) * milli}
	b.balance.Store(b.capacity)
	return b
}

// deposit credits one first attempt.
func (b *budget) deposit() {
	for {
		v := b.balance.Load()
		n := min(v+b.ratio, b.capacity)
		if n == v || b.balance.CompareAndSwap(v, n) {
			return
		}
	}
}

// withdraw takes a token for a retry or a hedge, or reports false.
func (b *budget) withdraw() bool {
	for {
		v := b.balance.Load()
		if v < milli {
			return false
		}
		if b.balance.CompareAndSwap(v, v-milli) {
			return true
		}
	}
}

// carry returns a budget with new settings holding old's balance (capped
// by the new capacity), so a reload neither refills nor empties it.
func (b *budget) carry(ratio float64, minTokens int) *budget {
	n := newBudget(ratio, minTokens)
	if b != nil {
		n.balance.Store(min(b.balance.Load(), n.capacity))
	}
	return n
}
