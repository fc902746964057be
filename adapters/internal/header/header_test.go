package header

import (
	"strings"
	"testing"
)

// TestOwned: the hop-by-hop headers, Host and the body's framing headers
// are owned in any letter case; other headers, content ones included,
// are not.
func TestOwned(t *testing.T) {
	for _, name := range []string{"Connection", "Keep-Alive", "Proxy-Connection", "TE", "Trailer",
		"Transfer-Encoding", "Upgrade", "Host", "Content-Type", "Content-Length", "Content-Encoding"} {
		for _, n := range []string{name, strings.ToLower(name), strings.ToUpper(name)} {
			if !Owned(n) {
				t.Errorf("Owned(%q) = false, want true", n)
			}
		}
	}
	for _, name := range []string{"Content-Disposition", "Content-Language", "X-Connection", "Trailers",
		"Accept-Encoding", "Sundial-Trace-Id", "", "Bad Name"} {
		if Owned(name) {
			t.Errorf("Owned(%q) = true, want false", name)
		}
	}
}
