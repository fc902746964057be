package cliadapter

import (
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
)

// fuzzInput has a field of each kind the flag derivation handles, and one
// it leaves to --input.
type fuzzInput struct {
	Name    string          `json:"name"`
	Count   int             `json:"count"`
	Small   int8            `json:"small"`
	Ratio   float64         `json:"ratio"`
	Verbose bool            `json:"verbose"`
	Tags    []string        `json:"tags"`
	Limit   *int            `json:"limit"`
	Wait    time.Duration   `json:"wait"`
	Nested  struct{ X int } `json:"nested"`
}

// FuzzDecodeInput feeds arbitrary --input documents and flag arguments
// (one per line) to the decoder. It must never panic; every rejection of
// the document must be an *inputError; and an accepted input must survive
// a round trip: its JSON encoding decodes as --input (no flags), and the
// JSON form reaches a fixed point.
func FuzzDecodeInput(f *testing.F) {
	f.Add([]byte(`{"name":"widget","count":1}`), "")
	f.Add([]byte(`{"count":1}`), "--count\n2")
	f.Add([]byte(`null`), "--tags\na,b\n--limit=3")
	f.Add([]byte(`{"nested":{"X":1},"small":-128}`), "--verbose")
	f.Add([]byte(`{"nmae":1}`), "")
	f.Add([]byte(`{} {}`), "--wait\n1.5s")
	f.Fuzz(func(t *testing.T, input []byte, args string) {
		fs := pflag.NewFlagSet("fuzz", pflag.ContinueOnError)
		fs.Usage = func() {}
		fields := newInputFlags(reflect.TypeFor[fuzzInput](), fs, nil)
		var argv []string
		if args != "" {
			argv = strings.Split(args, "\n")
		}
		if err := fs.Parse(argv); err != nil {
			return // pflag rejected the flags: a usage error
		}
		got, err := fields.decode(fs, input)
		if err != nil {
			var ie *inputError
			if pe, ok := errors.AsType[*pipeline.Error](err); ok && pe.Code() == operations.CodeUnknownField {
				return // the input policy's answer
			}
			if !errors.As(err, &ie) {
				t.Fatalf("decode(%q, %q) error = %T %v, want *inputError or %s", input, argv, err, err, operations.CodeUnknownField)
			}
			return
		}
		first, err := json.Marshal(got)
		if err != nil {
			if r := got.(*fuzzInput).Ratio; math.IsNaN(r) || math.IsInf(r, 0) {
				return // --ratio NaN is a float pflag accepts and JSON cannot carry
			}
			t.Fatalf("json.Marshal(decode(%q, %q)) error = %v", input, argv, err)
		}
		again, err := fields.decode(nil, first)
		if err != nil {
			t.Fatalf("decode(%s) of an accepted input's JSON error = %v", first, err)
		}
		// The first encoding may escape invalid UTF-8 as \ufffd; from the
		// second on, the JSON form is a fixed point.
		second, _ := json.Marshal(again)
		third, err := fields.decode(nil, second)
		if err != nil {
			t.Fatalf("decode(%s) of an accepted input's JSON error = %v", second, err)
		}
		if j, _ := json.Marshal(third); string(j) != string(second) {
			t.Fatalf("round trip of decode(%q, %q): %s, then %s, then %s", input, argv, first, second, j)
		}
	})
}

// FuzzParseTimeout checks ParseTimeout on arbitrary text: it never panics,
// accepts exactly the positive numbers strconv.ParseFloat reads (finite,
// or too large for a float64) and returns their value to the nanosecond
// (clamped to the largest Duration, at least one nanosecond).
func FuzzParseTimeout(f *testing.F) {
	for _, s := range []string{"30", "0.3", "abc", "-1", "0", "NaN", "1e400", "1e-400", "0x1p-2", "+Inf"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseTimeout(s)
		fl, perr := strconv.ParseFloat(s, 64)
		finite := perr == nil && !math.IsNaN(fl) && !math.IsInf(fl, 0)
		huge := perr != nil && isRange(perr) && fl > 0
		if err != nil {
			if !strings.HasPrefix(err.Error(), "cliadapter: timeout ") {
				t.Fatalf("ParseTimeout(%q) error = %q, want the package prefix", s, err)
			}
			if huge || (finite && fl > 0) {
				t.Fatalf("ParseTimeout(%q) error = %v, want it accepted (ParseFloat = %v)", s, err, fl)
			}
			return
		}
		if d <= 0 {
			t.Fatalf("ParseTimeout(%q) = %v, want > 0", s, d)
		}
		switch {
		case huge:
			if d != maxDuration {
				t.Fatalf("ParseTimeout(%q) = %v, want the largest Duration", s, d)
			}
		case !finite || fl < 0:
			t.Fatalf("ParseTimeout(%q) = %v, want an error (ParseFloat = %v, %v)", s, d, fl, perr)
		case fl*1e9 >= float64(maxDuration):
			if d != maxDuration {
				t.Fatalf("ParseTimeout(%q) = %v, want the largest Duration", s, d)
			}
		default:
			if want := max(time.Duration(math.Round(fl*1e9)), time.Nanosecond); d != want {
				t.Fatalf("ParseTimeout(%q) = %v, want %v", s, d, want)
			}
		}
	})
}
