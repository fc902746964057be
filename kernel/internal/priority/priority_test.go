package priority_test

import (
	"strings"
	"testing"

	"github.com/sundial-go/sundial/kernel/internal/priority"
	"github.com/sundial-go/sundial/pipeline"
)

func TestParsePriority(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in   string
		want pipeline.Priority
		ok   bool
	}{
		{"critical", pipeline.PriorityCritical, true},
		{"Default", pipeline.PriorityDefault, true},
		{"SHEDDABLE", pipeline.PrioritySheddable, true},
		{"", pipeline.PriorityDefault, false},
		{" critical", pipeline.PriorityDefault, false},
		{"critical, sheddable", pipeline.PriorityDefault, false},
		{"high", pipeline.PriorityDefault, false},
		{"\u017fheddable", pipeline.PriorityDefault, false}, // ſ folds to s in Unicode, not in ASCII
	} {
		if got, ok := priority.Parse(tt.in); got != tt.want || ok != tt.ok {
			t.Errorf("Parse(%q) = %v, %v; want %v, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

// FuzzParsePriority: Parse never panics; what it accepts is one of the
// three names in some ASCII case, and the class it returns prints as that
// name.
func FuzzParsePriority(f *testing.F) {
	for _, s := range []string{"critical", "Default", "sheddable", "", "urgent", "critical\x00", strings.Repeat("x", 4096)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, ok := priority.Parse(s)
		if !ok {
			if p != pipeline.PriorityDefault {
				t.Fatalf("Parse(%q) = %v, false; want default", s, p)
			}
			return
		}
		if len(s) != len(p.String()) || !strings.EqualFold(s, p.String()) {
			t.Fatalf("Parse(%q) = %v", s, p)
		}
	})
}
