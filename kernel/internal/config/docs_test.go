package config

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/sundial-go/sundial/resilience"
)

var update = flag.Bool("update", false, "rewrite docs/policy-keys.md from the table of keys")

// docsFile is docs/policy-keys.md, from this package's directory.
const docsFile = "../../../docs/policy-keys.md"

// TestDocsFile: docs/policy-keys.md is exactly what the table generates,
// so that it never drifts from the keys. Run with -update to rewrite it.
func TestDocsFile(t *testing.T) {
	want := Markdown()
	if *update {
		if err := os.WriteFile(docsFile, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(docsFile)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Errorf("%s is not what the table of keys generates; rewrite it with: go test ./kernel/internal/config -run TestDocsFile -update", docsFile)
	}
}

// TestStatedPriorityReserve: the default the table states for
// PriorityReserve is resilience.DefaultPriorityReserve, which the key
// applies.
func TestStatedPriorityReserve(t *testing.T) {
	for _, k := range Keys {
		if k.Name == "PriorityReserve" {
			if want := fmt.Sprint(resilience.DefaultPriorityReserve); k.Default != want {
				t.Errorf("PriorityReserve states default %q; resilience.DefaultPriorityReserve is %s", k.Default, want)
			}
			var tg Target
			k.value.apply(&tg, nil)
			if tg.Policy.PriorityReserve != resilience.DefaultPriorityReserve {
				t.Errorf("unset PriorityReserve applies %v, want %v", tg.Policy.PriorityReserve, resilience.DefaultPriorityReserve)
			}
			return
		}
	}
	t.Fatal("no PriorityReserve key")
}
