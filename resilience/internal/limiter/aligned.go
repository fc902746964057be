package limiter

import (
	"time"

	"github.com/sundial-go/sundial/resilience/internal/window"
)

// NewAlignedWindow returns a FixedWindow whose window 0 opens at origin,
// not now. Its windows then follow another clock's. The cluster's local
// fallback aligns them to the windows of the server.
// origin must not be after now. The arguments are valid (the caller
// checked them).
func NewAlignedWindow(permitLimit int, length time.Duration, queueLimit int, origin time.Time) *FixedWindow {
	return &FixedWindow{origin: origin, st: window.New(permitLimit, length, queueLimit)}
}

// Index returns the index of the window containing now.
func (l *FixedWindow) Index(now time.Time) int64 {
	return int64(max(now.Sub(l.origin), 0) / l.length())
}

// Hold takes up to n permits of the window containing now for calls
// counted elsewhere. It takes no more than are left. It takes none when
// calls are queued: the window is then used up.
func (l *FixedWindow) Hold(now time.Time, n int) {
	if n <= 0 || l.nq != nil {
		return
	}
	since := max(now.Sub(l.origin), 0)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.st.Advance(since)
	if l.st.Queued() == 0 {
		l.st.Reset(l.st.Index(since), min(l.st.Used()+int64(n), int64(l.st.Limit())))
	}
}
