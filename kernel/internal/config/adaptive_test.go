package config

import (
	"strings"
	"testing"

	"github.com/sundial-go/sundial/resilience"
)

// TestAdaptiveKeys: "adaptive" is the one string ConcurrencyLimit takes;
// the Adaptive object's keys are checked together, each error naming its
// key path.
func TestAdaptiveKeys(t *testing.T) {
	const path = "S"
	for _, tc := range []struct {
		name string
		doc  map[string]any
		want string // error prefix; "" for none
	}{
		{"adaptive", map[string]any{"ConcurrencyLimit": "adaptive"}, ""},
		{"other string", map[string]any{"ConcurrencyLimit": "auto"}, `kernel: S.ConcurrencyLimit: want a positive integer or "adaptive", got "auto"`},
		{"shadow of a static limit", map[string]any{"ConcurrencyLimit": 10.0, "Adaptive": map[string]any{"Shadow": true}}, ""},
		{"shadow of adaptive", map[string]any{"Operations": map[string]any{"a.b": map[string]any{
			"ConcurrencyLimit": "adaptive", "Adaptive": map[string]any{"Shadow": true}}}}, "kernel: S.Operations.a.b.Adaptive.Shadow: "},
		{"max below min", map[string]any{"Adaptive": map[string]any{"MinLimit": 10.0, "MaxLimit": 5.0}}, "kernel: S.Adaptive.MaxLimit: 5 is below MinLimit 10"},
		{"unknown", map[string]any{"Adaptive": map[string]any{"Max": 5.0}}, "kernel: S.Adaptive.Max: unknown key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(tc.doc, path)
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.want)) {
				t.Errorf("Parse = %v; want %q", err, tc.want)
			}
		})
	}
	p, err := Parse(map[string]any{"ConcurrencyLimit": "adaptive", "Adaptive": map[string]any{"MaxLimit": 50.0, "HealthyLatencyMs": 250.0}}, path)
	if err != nil {
		t.Fatal(err)
	}
	got := p.Resolve("x.y").Policy
	if got.ConcurrencyLimit != resilience.AdaptiveLimit || got.Adaptive.MaxLimit != 50 || got.Adaptive.HealthyLatency.Milliseconds() != 250 {
		t.Errorf("Resolve = %+v", got)
	}
}
