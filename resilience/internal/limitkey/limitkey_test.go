package limitkey

import (
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name, key string
		ok        bool
	}{
		{"empty", "", true},
		{"tenant", "acme-corp_42:eu", true},
		{"utf-8", "zürich", true},
		{"longest", strings.Repeat("k", MaxLen), true},
		{"too long", strings.Repeat("k", MaxLen+1), false},
		{"a megabyte", strings.Repeat("k", 1<<20), false},
		{"open brace", "a{b", false},
		{"close brace", "a}b", false},
		{"newline", "a\nb", false},
		{"nul", "a\x00", false},
		{"del", "a\x7f", false},
	} {
		if err := Check(tc.key); (err == nil) != tc.ok {
			t.Errorf("%s: Check = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}

func FuzzCheck(f *testing.F) {
	f.Add("acme")
	f.Add("a{b}")
	f.Fuzz(func(t *testing.T, key string) {
		if Check(key) == nil && (len(key) > MaxLen || strings.ContainsAny(key, "{}\n\r\x00")) {
			t.Fatalf("Check(%q) = nil", key)
		}
	})
}
