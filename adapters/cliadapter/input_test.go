package cliadapter

import (
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
)

func TestFlagName(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"name", "name"},
		{"delayMs", "delay-ms"},
		{"orderID", "order-id"},
		{"HTTPPort", "http-port"},
		{"amount_cents", "amount-cents"},
		{"v2Name", "v2-name"},
		{"retry-after", "retry-after"},
		{"Name", "name"},
		{"ID", "id"},
		{"aB", "a-b"},
		{"", ""},
		{"_x", ""},
		{"x_", ""},
		{"a__b", ""},
		{"9lives", ""},
		{"naïve", ""},
		{"with space", ""},
		{"-", ""},
	} {
		t.Run(tc.in, func(t *testing.T) {
			if got := flagName(tc.in); got != tc.want {
				t.Errorf("flagName(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

type cents int

type common struct {
	Tenant string `json:"tenant"`
}

type flagsInput struct {
	common
	Name    string          `json:"name" help:"the customer's name"`
	Count   int             `json:"count"`
	Small   int8            `json:"small"`
	Big     uint64          `json:"big"`
	Ratio   float64         `json:"ratio"`
	Verbose bool            `json:"verbose"`
	Tags    []string        `json:"tags"`
	IDs     []int           `json:"ids"`
	Wait    time.Duration   `json:"wait"`
	Limit   *int            `json:"limit"`
	Price   cents           `json:"price"`
	Addr    netip.Addr      `json:"addr"`
	Output  string          `json:"output"` // reserved flag name: --input only
	Nested  struct{ X int } `json:"nested"` // no flag type: --input only
	Labels  map[string]int  `json:"labels"` // --input only
	Skipped string          `json:"-"`
	NoTag   string
	hidden  string
}

func newFlagsInput(t *testing.T) (*inputFlags, *pflag.FlagSet) {
	t.Helper()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	fs.String("input", "", "")
	return newInputFlags(reflect.TypeFor[flagsInput](), fs, nil), fs
}

func TestInputFlagsDerivation(t *testing.T) {
	t.Parallel()
	f, fs := newFlagsInput(t)
	for _, tc := range []struct{ flag, typ, usage string }{
		{"tenant", "string", `input field "tenant"`},
		{"name", "string", "the customer's name"},
		{"count", "int", ""},
		{"small", "int8", ""},
		{"big", "uint64", ""},
		{"ratio", "float64", ""},
		{"verbose", "bool", ""},
		{"tags", "stringSlice", ""},
		{"ids", "intSlice", ""},
		{"wait", "duration", ""},
		{"limit", "int", ""},
		{"price", "int", ""},
		{"addr", "text", ""},
		{"no-tag", "string", `input field "NoTag"`},
	} {
		fl := fs.Lookup(tc.flag)
		if fl == nil {
			t.Errorf("flag --%s not defined", tc.flag)
			continue
		}
		if got := fl.Value.Type(); got != tc.typ {
			t.Errorf("--%s type = %q, want %q", tc.flag, got, tc.typ)
		}
		if tc.usage != "" && fl.Usage != tc.usage {
			t.Errorf("--%s usage = %q, want %q", tc.flag, fl.Usage, tc.usage)
		}
	}
	for _, name := range []string{"output", "nested", "labels", "skipped", "hidden", "common"} {
		if fs.Lookup(name) != nil {
			t.Errorf("flag --%s defined, want none", name)
		}
	}
	if got, want := f.inputOnly, []string{"output", "nested", "labels"}; !reflect.DeepEqual(got, want) {
		t.Errorf("inputOnly = %q, want %q", got, want)
	}
}

func TestInputFlagsNonStruct(t *testing.T) {
	t.Parallel()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	f := newInputFlags(reflect.TypeFor[[]int](), fs, nil)
	if n := len(f.fields); n != 0 {
		t.Fatalf("flags of []int = %d, want 0", n)
	}
	got, err := f.decode(fs, []byte(`[1,2]`))
	if err != nil {
		t.Fatalf("decode([1,2]) error = %v", err)
	}
	if v := *got.(*[]int); !reflect.DeepEqual(v, []int{1, 2}) {
		t.Errorf("decode([1,2]) = %v, want [1 2]", v)
	}
	if got, err := newInputFlags(nil, fs, nil).decode(fs, nil); got != nil || err != nil {
		t.Errorf("decode with no input type = %v, %v; want nil, nil", got, err)
	}
}

func TestDecodePrecedence(t *testing.T) {
	t.Parallel()
	ten := 10
	for _, tc := range []struct {
		name  string
		input string // "" : no --input
		args  []string
		want  flagsInput
	}{
		{name: "flags only", args: []string{"--name", "a", "--count", "3", "--verbose", "--tags", "x,y", "--tags", "z", "--wait", "1.5s", "--limit", "10", "--price", "99", "--addr", "127.0.0.1", "--tenant", "t1"},
			want: flagsInput{common: common{Tenant: "t1"}, Name: "a", Count: 3, Verbose: true, Tags: []string{"x", "y", "z"}, Wait: 1500 * time.Millisecond, Limit: &ten, Price: 99, Addr: netip.MustParseAddr("127.0.0.1")}},
		{name: "input only", input: `{"name":"b","count":4,"output":"o","nested":{"X":1},"labels":{"k":2},"tenant":"t2","NoTag":"n"}`,
			want: flagsInput{common: common{Tenant: "t2"}, Name: "b", Count: 4, Output: "o", Nested: struct{ X int }{1}, Labels: map[string]int{"k": 2}, NoTag: "n"}},
		{name: "flag overrides input field", input: `{"name":"b","count":4}`, args: []string{"--count", "5"},
			want: flagsInput{Name: "b", Count: 5}},
		{name: "flag set to zero overrides", input: `{"count":4,"verbose":true}`, args: []string{"--count", "0", "--verbose=false"},
			want: flagsInput{}},
		{name: "unset flags keep input fields", input: `{"ratio":0.5,"tags":["q"]}`, args: []string{"--name", "c"},
			want: flagsInput{Name: "c", Ratio: 0.5, Tags: []string{"q"}}},
		{name: "nothing", want: flagsInput{}},
		{name: "null input", input: `null`, want: flagsInput{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, fs := newFlagsInput(t)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatalf("Parse(%q) error = %v", tc.args, err)
			}
			var raw []byte
			if tc.input != "" {
				raw = []byte(tc.input)
			}
			got, err := f.decode(fs, raw)
			if err != nil {
				t.Fatalf("decode(%s, %q) error = %v", tc.input, tc.args, err)
			}
			if g := got.(*flagsInput); !reflect.DeepEqual(*g, tc.want) {
				t.Errorf("decode(%s, %q) = %+v, want %+v", tc.input, tc.args, *g, tc.want)
			}
		})
	}
}

func TestDecodeOptionalFieldIsACopy(t *testing.T) {
	t.Parallel()
	f, fs := newFlagsInput(t)
	if err := fs.Parse([]string{"--limit", "7"}); err != nil {
		t.Fatal(err)
	}
	a, _ := f.decode(fs, nil)
	b, _ := f.decode(fs, nil)
	pa, pb := a.(*flagsInput).Limit, b.(*flagsInput).Limit
	if pa == pb || *pa != 7 || *pb != 7 {
		t.Errorf("decode twice: Limit pointers %p, %p (values %d, %d); want distinct pointers to 7", pa, pb, *pa, *pb)
	}
}

func TestDecodeErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, input string
		field, msg  string
		misfit      bool
	}{
		{"syntax", `{"name":}`, "", "invalid JSON at offset 9", false},
		{"truncated", `{"name":"a"`, "", "truncated JSON document", false},
		{"empty", "  \n", "", "empty document", false},
		{"trailing", `{"name":"a"} {}`, "", "unexpected data after the JSON value", false},
		{"trailing garbage", `{} x`, "", "unexpected data after the JSON value", false},
		{"wrong type", `{"count":"three"}`, "count", "cannot use a JSON string, want an integer that fits int", true},
		{"overflow", `{"small":300}`, "small", "cannot use a JSON number 300, want an integer that fits int8", true},
		{"nested wrong type", `{"nested":{"X":true}}`, "nested.X", "cannot use a JSON bool, want an integer", true},
		{"not an object", `[1]`, "", "cannot use a JSON array here, want an object", true},
		{"text field", `{"addr":"not-an-ip"}`, "", "ParseAddr", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, fs := newFlagsInput(t)
			_, err := f.decode(fs, []byte(tc.input))
			var ie *inputError
			if !errors.As(err, &ie) {
				t.Fatalf("decode(%s) error = %v, want *inputError", tc.input, err)
			}
			if ie.Field != tc.field || !strings.Contains(ie.Msg, tc.msg) || ie.Misfit != tc.misfit {
				t.Errorf("decode(%s) = %+v, want field %q, message containing %q, misfit %v", tc.input, *ie, tc.field, tc.msg, tc.misfit)
			}
			if strings.Contains(ie.Error(), "flagsInput") || strings.Contains(ie.Error(), "cliadapter.") {
				t.Errorf("decode(%s) error %q names a Go type", tc.input, ie.Error())
			}
		})
	}
}

func TestFlagTypeErrors(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--count", "abc"},
		{"--small", "300"},
		{"--big", "-1"},
		{"--verbose=maybe"},
		{"--wait", "5"},
		{"--addr", "nope"},
		{"--nested", "1"},
	} {
		_, fs := newFlagsInput(t)
		if err := fs.Parse(args); err == nil {
			t.Errorf("Parse(%q) error = nil, want a flag error", args)
		}
	}
}

func TestReadInput(t *testing.T) {
	t.Parallel()
	if b, err := readInput(`{"a":1}`, nil); err != nil || string(b) != `{"a":1}` {
		t.Errorf(`readInput({"a":1}) = %q, %v`, b, err)
	}
	if b, err := readInput("-", strings.NewReader(`{"b":2}`)); err != nil || string(b) != `{"b":2}` {
		t.Errorf(`readInput(-, stdin) = %q, %v`, b, err)
	}
	if _, err := readInput("-", nil); err == nil {
		t.Error("readInput(-, nil stdin) error = nil")
	}
	big := strings.NewReader(strings.Repeat(" ", maxInputBytes+1))
	if _, err := readInput("-", big); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("readInput(-, %d bytes) error = %v, want too large", maxInputBytes+1, err)
	}
	if _, err := readInput(strings.Repeat(" ", maxInputBytes+1), nil); err == nil {
		t.Errorf("readInput(%d bytes) error = nil, want too large", maxInputBytes+1)
	}
	if _, err := readInput("-", errReader{}); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Errorf("readInput(-, failing stdin) error = %v, want the read error", err)
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("boom") }

// TestDecodeInputPolicy: --input goes through the operation's input policy
// (operations.CheckJSON) before decoding: by default an unknown field or a
// key in the wrong case is KERNEL_VALIDATION_003 naming it, the answer
// HTTP and gRPC give; AllowUnknownFields and FoldKeyCase relax it.
func TestDecodeInputPolicy(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, input string
		policy      operations.InputPolicy
		field, msg  string // "" field: accepted
	}{
		{"unknown", `{"nmae":"a"}`, operations.InputPolicy{}, "nmae", "Unknown field 'nmae'."},
		{"nested unknown", `{"nested":{"X":1,"Y":2}}`, operations.InputPolicy{}, "nested.Y", "Unknown field 'nested.Y'."},
		{"key case", `{"Name":"a"}`, operations.InputPolicy{}, "Name", "did you mean 'name'?"},
		{"unknown allowed", `{"nmae":"a","name":"b"}`, operations.InputPolicy{AllowUnknownFields: true}, "", ""},
		{"case folded", `{"Name":"b"}`, operations.InputPolicy{FoldKeyCase: true}, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, fs := newFlagsInput(t)
			f.policy = tc.policy
			got, err := f.decode(fs, []byte(tc.input))
			if tc.field == "" {
				if err != nil || got.(*flagsInput).Name != "b" {
					t.Fatalf("decode(%s) = %+v, %v, want name b", tc.input, got, err)
				}
				return
			}
			pe, ok := errors.AsType[*pipeline.Error](err)
			if !ok || pe.Code() != operations.CodeUnknownField || pe.Details()["field"] != tc.field || !strings.Contains(pe.Message(), tc.msg) {
				t.Fatalf("decode(%s) error = %v, want %s naming field %q with %q", tc.input, err, operations.CodeUnknownField, tc.field, tc.msg)
			}
		})
	}
}
