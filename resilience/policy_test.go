package resilience_test

import (
	"go/build"
	"strings"
	"testing"
	"time"

	"github.com/sundial-go/sundial/resilience"
)

func TestPolicyLimited(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		p    resilience.Policy
		want bool
	}{
		{"zero", resilience.Policy{}, false},
		{"defaults, queues and a timeout only", resilience.Policy{Window: resilience.DefaultWindow, BreakDuration: resilience.DefaultBreakDuration, QueueLimit: 3, ConcurrencyQueueLimit: 2, Timeout: time.Second}, false},
		{"rate limit", resilience.Policy{PermitLimit: 1}, true},
		{"concurrency limit", resilience.Policy{ConcurrencyLimit: 1}, true},
		{"breaker", resilience.Policy{FailureThreshold: 1}, true},
	} {
		if got := tc.p.Limited(); got != tc.want {
			t.Errorf("%s: Limited() = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestNoConfigImports: configuration parsing lives in the kernel; the
// algorithms import neither the operations package nor a config library.
func TestNoConfigImports(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range pkg.Imports {
		if strings.HasSuffix(imp, "/sundial/operations") || strings.HasPrefix(imp, "github.com/knadh/koanf") ||
			strings.HasSuffix(imp, "/sundial/kernel") || strings.Contains(imp, "/sundial/adapters") {
			t.Errorf("resilience imports %s", imp)
		}
	}
}
