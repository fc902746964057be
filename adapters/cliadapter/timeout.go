package cliadapter

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// maxDuration is the longest time.Duration.
const maxDuration = time.Duration(math.MaxInt64)

// ParseTimeout parses the value of --timeout: a number of seconds greater
// than zero, fractions allowed ("30", "0.25", "1e-3"). It returns an error
// for anything else — not a number, zero, negative, NaN, "Inf" — so
// that a typo never silently means "no deadline". Values are rounded to the
// nanosecond, and a positive value below one nanosecond counts as one
// nanosecond (it expires at once). A value too large for a time.Duration is
// clamped to the largest one; the kernel caps every deadline at
// Sundial.Kernel.MaxTimeoutSeconds anyway.
func ParseTimeout(s string) (time.Duration, error) {
	d, why := parseTimeout(s)
	if why != "" {
		return 0, fmt.Errorf("cliadapter: timeout %q: %s", s, why)
	}
	return d, nil
}

// parseTimeout is ParseTimeout returning the reason a value is rejected.
func parseTimeout(s string) (time.Duration, string) {
	f, err := strconv.ParseFloat(s, 64)
	outOfRange := isRange(err) // a well-formed number beyond float64: ±Inf
	switch {
	case err != nil && !outOfRange, math.IsNaN(f), math.IsInf(f, 0) && !outOfRange:
		return 0, "not a finite number of seconds"
	case math.Signbit(f) || (f == 0 && !nonZeroMantissa(s)):
		return 0, "must be greater than 0 seconds"
	case f*1e9 >= float64(maxDuration): // also +Inf from a huge literal
		return maxDuration, ""
	}
	return max(time.Duration(math.Round(f*1e9)), time.Nanosecond), ""
}

// nonZeroMantissa reports whether the well-formed float literal s has a
// non-zero digit before its exponent: ParseFloat rounds such a value to 0
// when it underflows ("1e-400"), but it is still greater than zero.
func nonZeroMantissa(s string) bool {
	s = strings.TrimLeft(s, "+-")
	exp := "eE"
	if len(s) > 1 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X') {
		s, exp = s[2:], "pP"
	}
	if i := strings.IndexAny(s, exp); i >= 0 {
		s = s[:i]
	}
	return strings.Trim(s, "0._") != ""
}

func isRange(err error) bool {
	ne, ok := err.(*strconv.NumError)
	return ok && ne.Err == strconv.ErrRange
}

// timeoutValue is the pflag.Value of --timeout. Its zero value is "no
// timeout given".
type timeoutValue struct {
	d   time.Duration
	set bool
}

// Set parses s with ParseTimeout. Its error omits the package prefix and
// the value: the command reports it as `invalid value "abc" for
// --timeout: ...` (humanFlagError).
func (v *timeoutValue) Set(s string) error {
	d, why := parseTimeout(s)
	if why != "" {
		return errors.New(why)
	}
	v.d, v.set = d, true
	return nil
}

func (v *timeoutValue) Type() string { return "seconds" }

func (v *timeoutValue) String() string {
	if !v.set {
		return ""
	}
	return strconv.FormatFloat(v.d.Seconds(), 'f', -1, 64)
}
