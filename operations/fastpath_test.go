package operations

import (
	"reflect"
	"testing"
	"time"
)

// fuzzed has every rule the fast path compiles, on every kind it knows.
type fuzzed struct {
	S1 string  `validate:"required,min=2,max=5"`
	S2 string  `validate:"omitempty,oneof=EUR USD 'New York'"`
	S3 string  `validate:"len=3"`
	I1 int     `validate:"gt=-3,lt=7"`
	I2 int8    `validate:"omitempty,oneof=1 2 03"`
	U1 uint16  `validate:"gte=0x10,lte=300"`
	F1 float32 `validate:"min=0.1,max=2.5"`
	F2 float64 `validate:"gt=0,lt=1e3"`
	B  bool    `validate:"required"`
}

// FuzzFastPathAgrees: for any values, the fast path's verdict on an input
// it decides alone is the validator's.
func FuzzFastPathAgrees(f *testing.F) {
	for _, p := range compilePlan(reflect.TypeFor[fuzzed]()).fields {
		if p.validator {
			f.Fatalf("field %d of fuzzed goes to the validator; the fast path must decide it", p.index)
		}
	}
	f.Add("ab", "", "abc", 0, int8(0), uint16(16), float32(0.1), 1.0, true)
	f.Add("abcdé", "New York", "éé€", 6, int8(2), uint16(300), float32(2.5), 999.9, true)
	f.Add("a", "New", "ab", -3, int8(3), uint16(15), float32(0.099999), 0.0, false)
	f.Add("\xff\xfe", "'New York'", "\xff\xff\xff", 7, int8(1), uint16(301), float32(2.5000002), 1e3, true)
	f.Fuzz(func(t *testing.T, s1, s2, s3 string, i1 int, i2 int8, u1 uint16, f1 float32, f2 float64, b bool) {
		x := fuzzed{S1: s1, S2: s2, S3: s3, I1: i1, I2: i2, U1: u1, F1: f1, F2: f2, B: b}
		fast := defaultRules.passes(reflect.ValueOf(&x).Elem())
		full := defaultRules.v.Struct(&x) == nil
		if fast != full {
			t.Errorf("%+v: fast path %v, validator %v", x, fast, full)
		}
	})
}

// TestFastPathDefers: a rule, a kind or a nesting the fast path does not
// know goes to the validator, which decides.
func TestFastPathDefers(t *testing.T) {
	type inner struct {
		A int `validate:"min=1"`
	}
	type mixed struct {
		Email string        `validate:"omitempty,email"`
		Tags  []string      `validate:"max=2"`
		In    inner         // no tag, but constrained inside
		Alt   string        `validate:"email|uuid"`
		Hex   string        `validate:"min=0x"` // a parameter it cannot read
		Plain int           // no constraints
		hid   int           `validate:"min=1"`  //nolint:unused // unexported: the validator skips it
		Wait  time.Duration `validate:"min=1s"` // its parameters are durations
	}
	p := compilePlan(reflect.TypeFor[mixed]())
	got := map[int]bool{}
	for _, f := range p.fields {
		got[f.index] = f.validator
	}
	want := map[int]bool{0: true, 1: true, 2: true, 3: true, 4: true, 7: true}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("fields to the validator = %v, want %v", got, want)
	}
	x := mixed{}
	if defaultRules.passes(reflect.ValueOf(&x).Elem()) {
		t.Error("a value with fields the fast path does not know passed it")
	}
	_ = x.hid
}
