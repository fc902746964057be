package kernel_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/sundial-go/sundial/kernel"
)

// FuzzConfig feeds arbitrary documents to the config loader: kernel.New
// must never panic; it either loads or returns an error that says where.
func FuzzConfig(f *testing.F) {
	seeds := []string{
		`{}`,
		`{"Sundial":{"Kernel":{"MaxTimeoutSeconds":30,"Resilience":{"PermitLimit":1000,"WindowSeconds":1,"Operations":{"orders.create":{"PermitLimit":2,"WindowSeconds":60,"ConcurrencyLimit":1}}}}}}`,
		`{"Sundial":{"Kernel":{"Resilience":{"Operations":{"orders.create":{"PermitLimit":1.5}}}}}}`,
		`{"Sundial":{"Kernel":{"Resilience":{"Operations":{"Orders":{"PermitLimit":1}}}}}}`,
		`{"Sundial":{"Kernel":{"Resilience":{"BreakSeconds":1e400}}}}`,
		`{"Sundial":{"Kernel":{"UseBuiltInMiddleware":false,"Resilience":[]}}}`,
		`{"Sundial":{"Kernel":{"Resilience":{"Operations":{"a.b":null}}}}}`,
		`[1,2,3]`, `null`, `"x"`, `{"Sundial":7}`,
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		k, err := kernel.New(kernel.WithConfigJSON(doc))
		if err != nil {
			if !strings.HasPrefix(err.Error(), "kernel: ") && !strings.HasPrefix(err.Error(), "resilience: ") {
				t.Fatalf("error without a package prefix: %v", err)
			}
			// A JSON object is loaded; what is wrong in it is a key, and
			// the error names its path.
			var obj map[string]any
			if json.Unmarshal(doc, &obj) == nil && obj != nil && !strings.Contains(err.Error(), "Sundial") && !strings.Contains(err.Error(), "keys must not contain") {
				t.Fatalf("kernel.New(%s) = %v, want an error naming the key path", doc, err)
			}
			return
		}
		if k.Settings().MaxTimeout <= 0 {
			t.Fatalf("loaded with a non-positive MaxTimeout %v", k.Settings().MaxTimeout)
		}
		if !k.Settings().UseBuiltInMiddleware {
			return // the Resilience section is not read: the zero policy
		}
		p := k.PolicyFor("orders.create")
		if p.PermitLimit < 0 || p.QueueLimit < 0 || p.ConcurrencyLimit < 0 || p.Window <= 0 || p.BreakDuration <= 0 || p.Timeout < 0 {
			t.Fatalf("loaded an invalid policy %+v", p)
		}
	})
}
