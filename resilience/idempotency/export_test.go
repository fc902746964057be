package idempotency

// Names the tests use.
var (
	Fingerprint = fingerprint
	ScopedKey   = scopedKey
)

// InProgressRetryAfter is the retry-after of a 409 for a running key.
const InProgressRetryAfter = inProgressRetryAfter

// StoreLen returns the records held by a store of NewMemoryStore and the
// bytes accounted for them.
func StoreLen(s Store) (entries int, bytes int64) { return s.(*memoryStore).len() }
