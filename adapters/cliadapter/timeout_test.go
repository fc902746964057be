package cliadapter

import (
	"strings"
	"testing"
	"time"
)

func TestParseTimeout(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want time.Duration
		err  string // substring of the error; "" for success
	}{
		{"30", 30 * time.Second, ""},
		{"0.3", 300 * time.Millisecond, ""},
		{".25", 250 * time.Millisecond, ""},
		{"1e-3", time.Millisecond, ""},
		{"1.5e0", 1500 * time.Millisecond, ""},
		{"0.0000000004", time.Nanosecond, ""}, // rounds to 0 ns: one nanosecond
		{"1e-400", time.Nanosecond, ""},       // underflows float64: still positive
		{"0x1p-2000", time.Nanosecond, ""},
		{"0x0p5", 0, "greater than 0"},
		{"0e-400", 0, "greater than 0"},
		{"0x1p-2", 250 * time.Millisecond, ""},
		{"1e300", maxDuration, ""}, // clamped; the kernel caps it
		{"1e400", maxDuration, ""}, // overflows float64: clamped
		{"9223372036.854775807", maxDuration, ""},
		{"abc", 0, "not a finite number"},
		{"", 0, "not a finite number"},
		{" 1", 0, "not a finite number"},
		{"1s", 0, "not a finite number"},
		{"NaN", 0, "not a finite number"},
		{"inf", 0, "not a finite number"},
		{"+Inf", 0, "not a finite number"},
		{"-Infinity", 0, "not a finite number"},
		{"0", 0, "greater than 0"},
		{"0.0", 0, "greater than 0"},
		{"-0", 0, "greater than 0"},
		{"-1", 0, "greater than 0"},
		{"-1e-400", 0, "greater than 0"},
		{"-1e400", 0, "greater than 0"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseTimeout(tc.in)
			if tc.err == "" {
				if err != nil || got != tc.want {
					t.Errorf("ParseTimeout(%q) = %v, %v; want %v, nil", tc.in, got, err, tc.want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.HasPrefix(err.Error(), "cliadapter: timeout ") {
				t.Errorf("ParseTimeout(%q) = %v, %v; want an error containing %q", tc.in, got, err, tc.err)
			}
		})
	}
}

func TestTimeoutValue(t *testing.T) {
	t.Parallel()
	var v timeoutValue
	if v.String() != "" || v.set {
		t.Fatalf("zero timeoutValue = %q (set %v), want unset", v.String(), v.set)
	}
	if err := v.Set("0.3"); err != nil || v.d != 300*time.Millisecond || !v.set || v.String() != "0.3" {
		t.Errorf("Set(0.3) = %v; value %v %q set %v", err, v.d, v.String(), v.set)
	}
	if err := v.Set("abc"); err == nil || err.Error() != "not a finite number of seconds" {
		t.Errorf("Set(abc) = %v, want %q", err, "not a finite number of seconds")
	}
	if v.d != 300*time.Millisecond {
		t.Errorf("after a failed Set, value = %v, want the previous 300ms", v.d)
	}
}
