package cluster

// Names the tests use.
type Mode = fallbackMode

// The OnStoreError modes.
const (
	Local  = modeLocal
	Open   = modeOpen
	Closed = modeClosed
)

// ParseMode is parseMode.
var ParseMode = parseMode

// MaxLease and DefaultLeaseGrace bound a concurrency lease.
const (
	MaxLease          = maxLease
	DefaultLeaseGrace = defaultLeaseGrace
)

// Replicas returns the number of live replicas last counted.
func (s *Store) Replicas() int { return s.replicaCount() }
