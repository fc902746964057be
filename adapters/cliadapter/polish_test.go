package cliadapter

import (
	"os"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/spf13/pflag"

	"github.com/sundial-go/sundial/pipeline"
)

// TestHumanFlagErrors: a malformed flag value is reported as a line that
// names the flag, the value and what the flag takes — never Go's parser
// (strconv.ParseInt, invalid syntax) — on stderr and in the rejection the
// kernel observes, with exit code 2.
func TestHumanFlagErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"test", "echo", "--count", "two"}, `app: invalid value "two" for --count: want an integer`},
		{[]string{"test", "echo", "--count", "99999999999999999999"}, `app: invalid value "99999999999999999999" for --count: the number is out of range for int`},
		{[]string{"test", "echo", "--timeout", "soon"}, `app: invalid value "soon" for --timeout: not a finite number of seconds`},
		{[]string{"test", "echo", "--output", "yaml"}, `app: invalid value "yaml" for --output: output format "yaml" is not "json" or "text"`},
	} {
		r := execute(t, testKernel(t), nil, "", tc.args...)
		if r.code != exitValidation || !strings.HasPrefix(r.stderr, tc.want+"\n") {
			t.Errorf("app %q = exit %d, stderr %q; want exit 2 and the line %q", tc.args, r.code, r.stderr, tc.want)
		}
		for _, internal := range []string{"strconv", "ParseInt", "invalid syntax", "cliadapter:"} {
			if strings.Contains(r.stderr, internal) {
				t.Errorf("app %q stderr %q shows Go internals (%q)", tc.args, r.stderr, internal)
			}
		}
	}
	// Flags of pflag's other types.
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	fs.Bool("yes", false, "")
	fs.Duration("wait", 0, "")
	fs.Float64("ratio", 0, "")
	fs.IntSlice("ids", nil, "")
	for _, tc := range []struct{ arg, want string }{
		{"--yes=maybe", `invalid value "maybe" for --yes: want true or false`},
		{"--wait=soon", `invalid value "soon" for --wait: want a duration such as 300ms, 1.5s or 2m`},
		{"--ratio=half", `invalid value "half" for --ratio: want a number`},
		{"--ids=1,x", `invalid value "1,x" for --ids: want comma-separated integers`},
	} {
		err := fs.Parse([]string{tc.arg})
		if got := humanFlagError(err); got == nil || got.Error() != tc.want {
			t.Errorf("humanFlagError(%v) = %v, want %q", err, got, tc.want)
		}
	}
}

// TestFlagValueCompletion: shell completion offers json and text for
// --output, and - for --input, never file names; --timeout offers no file
// names either.
func TestFlagValueCompletion(t *testing.T) {
	t.Parallel()
	noFiles := ":4\n" // cobra.ShellCompDirectiveNoFileComp
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"__complete", "test", "echo", "--output", ""}, []string{"json\tthe result as indented JSON (default)\n", "text\tone line per field\n"}},
		{[]string{"__complete", "test", "echo", "--output", "t"}, []string{"text\t"}},
		{[]string{"__complete", "test", "echo", "--input", ""}, []string{"-\tread the JSON object from standard input\n"}},
		{[]string{"__complete", "test", "echo", "--timeout", ""}, nil},
	} {
		r := execute(t, testKernel(t), nil, "", tc.args...)
		if !strings.HasSuffix(r.stdout, noFiles) {
			t.Errorf("app %q = %q, want the directive %q (no file names)", tc.args, r.stdout, noFiles)
		}
		for _, w := range tc.want {
			if !strings.Contains(r.stdout, w) {
				t.Errorf("app %q = %q, want %q", tc.args, r.stdout, w)
			}
		}
		if tc.args[len(tc.args)-1] == "t" && strings.Contains(r.stdout, "json") {
			t.Errorf("app %q = %q offers json for the prefix t", tc.args, r.stdout)
		}
	}
}

// TestCleanDescriptions: the flag and command descriptions shell
// completion shows carry no back quotes (pflag's value-name markers), while
// the help still names the values (--input object, --timeout seconds).
func TestCleanDescriptions(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"__complete", "test", "echo", "--"},
		{"__complete", "test", ""},
		{"__complete", ""},
	} {
		r := execute(t, testKernel(t), nil, "", args...)
		if strings.Contains(r.stdout, "`") {
			t.Errorf("app %q = %q, with back quotes", args, r.stdout)
		}
		if !strings.Contains(r.stdout, "\t") {
			t.Errorf("app %q = %q, want descriptions", args, r.stdout)
		}
	}
	r := execute(t, testKernel(t), nil, "", "test", "echo", "--help")
	for _, want := range []string{"--input object", "--timeout seconds", "--output format"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("help lacks %q:\n%s", want, r.stdout)
		}
	}
}

// TestNewlineAfterInterrupt: when stderr is a terminal, which echoes ^C
// without a newline, the CANCELLED report after a Ctrl-C starts on a line
// of its own; the Problem Details JSON follows unchanged. Not on a
// terminal, stderr starts with the JSON.
func TestNewlineAfterInterrupt(t *testing.T) {
	t.Parallel()
	for _, tty := range []bool{true, false} {
		synctest.Test(t, func(t *testing.T) {
			s := signals{ch: make(chan os.Signal, 1)}
			s.at(100*time.Millisecond, os.Interrupt)
			kf, wait := tracked(testKernel(t))
			defer wait(t)
			r := executeOn(t, testRegistry(t), kf, []Option{withSignalChannel(s.ch), withTerminal(tty)},
				strings.NewReader(""), "test", "sleep", "--delay-ms", "1000")
			want := "{"
			if tty {
				want = "\n{"
			}
			if r.code != exitCanceled || !strings.HasPrefix(r.stderr, want) {
				t.Errorf("terminal %v: exit %d, stderr %q; want exit 8 and stderr starting %q", tty, r.code, r.stderr, want)
			}
			if p := problemOf(t, r.stderr); p.Code != pipeline.CodeCanceled {
				t.Errorf("terminal %v: Problem Details code %q, want %s", tty, p.Code, pipeline.CodeCanceled)
			}
		})
	}
}
