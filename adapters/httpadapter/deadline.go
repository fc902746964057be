package httpadapter

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Header names of the inbound and outbound deadline.
const (
	// HeaderDeadline carries the caller's absolute deadline as an RFC 3339
	// timestamp in UTC, with optional fractional seconds:
	// "2026-03-01T12:00:02.5Z". It survives queues and proxies that hold a
	// request for a while, but trusts both clocks to agree.
	HeaderDeadline = "Sundial-Deadline"
	// DefaultRelativeDeadlineHeader carries the time remaining, in whole
	// milliseconds, when the request left the caller: "1992". It is immune
	// to clock skew but does not count the time the request spent in
	// transit. The inbound name is configurable with
	// WithRelativeDeadlineHeader.
	DefaultRelativeDeadlineHeader = "Sundial-Timeout-Ms"
	// HeaderPriority carries the class the caller asks for: "critical",
	// "default" or "sheddable" (kernel.Caller.Priority). It can only
	// lower the operation's configured class; a value naming no class is
	// a 400, KERNEL_VALIDATION_009.
	HeaderPriority = "Sundial-Priority"
)

// headerValue returns the values of the header name joined with ", ", as
// a repeated field reads (a repeated priority then names no class): ""
// when absent.
func headerValue(h http.Header, name string) string {
	switch vs := h[name]; len(vs) {
	case 0:
		return ""
	case 1:
		return vs[0]
	default:
		return strings.Join(vs, ", ")
	}
}

// Limits of the deadline parsers. Anything longer is rejected before it is
// looked at: a header value cannot make the parser do unbounded work.
const (
	// maxDeadlineLen is the length of the longest well-formed absolute
	// deadline: "2006-01-02T15:04:05.123456789Z".
	maxDeadlineLen = len("2006-01-02T15:04:05.123456789Z")
	// maxTimeoutDigits bounds the relative form: 12 digits of milliseconds
	// (about 31 years) converts to a time.Duration without overflow.
	maxTimeoutDigits = 12
)

// errBadDeadline is the cause of every malformed-deadline outcome; the
// caller sees a message naming the header instead.
var errBadDeadline = errors.New("httpadapter: malformed deadline")

// parseDeadline parses the value of a Sundial-Deadline header: an RFC 3339
// timestamp in UTC ("Z" suffix, upper-case "T" and "Z"), with 1 to 9
// fractional digits or none, e.g. "2026-03-01T12:00:02Z" or
// "2026-03-01T12:00:02.125Z". It rejects everything else — offsets other
// than Z, more than nanosecond precision, leap seconds, control
// characters, surrounding spaces, values longer than 30 bytes — with an
// error; it never panics. The returned time is in UTC.
func parseDeadline(v string) (time.Time, error) {
	n := len(v)
	if n < len("2006-01-02T15:04:05Z") || n > maxDeadlineLen || v[n-1] != 'Z' {
		return time.Time{}, errBadDeadline
	}
	// Fixed layout up to the seconds; then optional ".digits", then "Z".
	const layout = "dddd-dd-ddTdd:dd:dd"
	if !fitsLayout(v, layout) || !validFraction(v[len(layout):n-1]) {
		return time.Time{}, errBadDeadline
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, errBadDeadline
	}
	return t.UTC(), nil
}

// fitsLayout reports whether v starts with layout, where each 'd' stands
// for an ASCII digit and any other byte for itself. v is at least as long
// as layout.
func fitsLayout(v, layout string) bool {
	for i := 0; i < len(layout); i++ {
		if layout[i] == 'd' {
			if !isDigit(v[i]) {
				return false
			}
		} else if v[i] != layout[i] {
			return false
		}
	}
	return true
}

// validFraction reports whether frac is empty or a dot and 1 or more
// ASCII digits.
func validFraction(frac string) bool {
	if frac == "" {
		return true
	}
	if len(frac) < 2 || frac[0] != '.' {
		return false
	}
	for i := 1; i < len(frac); i++ {
		if !isDigit(frac[i]) {
			return false
		}
	}
	return true
}

// isDigit reports whether c is an ASCII digit.
func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// parseTimeoutMs parses the relative form of the deadline: the remaining
// time as 1 to 12 ASCII digits of milliseconds ("0" means the deadline has
// passed). Signs, spaces, fractions, exponents and longer values are
// rejected with an error; it never panics.
func parseTimeoutMs(v string) (time.Duration, error) {
	if len(v) == 0 || len(v) > maxTimeoutDigits {
		return 0, errBadDeadline
	}
	var ms int64
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < '0' || c > '9' {
			return 0, errBadDeadline
		}
		ms = ms*10 + int64(c-'0')
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// formatDeadline formats d for the Sundial-Deadline header: UTC, truncated
// to the millisecond (so the receiver never sees a later instant than d).
func formatDeadline(d time.Time) string {
	var buf [len("2006-01-02T15:04:05.000Z")]byte
	return string(d.UTC().Truncate(time.Millisecond).AppendFormat(buf[:0], "2006-01-02T15:04:05.000Z"))
}

// formatTimeoutMs formats a remaining duration for the relative header:
// whole milliseconds, rounded down, never negative.
func formatTimeoutMs(remaining time.Duration) string {
	return strconv.FormatInt(max(remaining.Milliseconds(), 0), 10)
}

// inboundDeadline reads the caller's deadline from h at now: the earlier of
// the absolute header and the relative header (relName, "" to ignore it).
// It returns the zero time when the caller sent neither, and a header name
// with errBadDeadline when one is malformed or repeated.
func inboundDeadline(h http.Header, relName string, now time.Time) (time.Time, string, error) {
	var d time.Time
	if vs := h[HeaderDeadline]; len(vs) > 0 {
		if len(vs) > 1 {
			return time.Time{}, HeaderDeadline, errBadDeadline
		}
		t, err := parseDeadline(vs[0])
		if err != nil {
			return time.Time{}, HeaderDeadline, err
		}
		if t.IsZero() {
			// 0001-01-01T00:00:00Z is a deadline long past, not "none":
			// the zero time means no deadline to the kernel.
			t = t.Add(time.Nanosecond)
		}
		d = t
	}
	if relName != "" {
		if vs := h[relName]; len(vs) > 0 {
			if len(vs) > 1 {
				return time.Time{}, relName, errBadDeadline
			}
			rem, err := parseTimeoutMs(vs[0])
			if err != nil {
				return time.Time{}, relName, err
			}
			if t := now.Add(rem); d.IsZero() || t.Before(d) {
				d = t
			}
		}
	}
	return d, "", nil
}
