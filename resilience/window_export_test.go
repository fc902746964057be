package resilience

// OnSweepForTest makes k call f, under its lock, each time it sweeps its
// limiters for idle ones, with the number of keys swept.
func (k *KeyedFixedWindow) OnSweepForTest(f func(keys int)) { k.onSweep = f }

// DefaultMaxKeys is the keys a KeyedFixedWindow holds by default.
const DefaultMaxKeys = defaultMaxKeys
