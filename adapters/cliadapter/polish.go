package cliadapter

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// humanFlagError rewrites pflag's error for a malformed flag value as a
// line for people. pflag's quotes Go's parser: `strconv.ParseInt: parsing
// "x": invalid syntax`. The line names the flag, the value and what it
// takes: `invalid value "x" for --amount: want an integer`. Other errors
// are returned unchanged. So is an error whose chain cannot be walked, an
// Unwrap method that panics.
func humanFlagError(err error) (out error) {
	defer func() {
		if recover() != nil {
			out = err
		}
	}()
	ive, ok := errors.AsType[*pflag.InvalidValueError](err)
	if !ok || ive == nil || ive.GetFlag() == nil {
		return err
	}
	f := ive.GetFlag()
	return fmt.Errorf("invalid value %q for --%s: %s", ive.GetValue(), f.Name, want(f.Value.Type(), errors.Unwrap(ive)))
}

// want says what a flag of pflag type typ takes, given the error its
// parser returned.
func want(typ string, cause error) string {
	var ne *strconv.NumError
	rangeErr := errors.As(cause, &ne) && errors.Is(ne.Err, strconv.ErrRange)
	switch typ {
	case "int", "int8", "int16", "int32", "int64":
		if rangeErr {
			return "the number is out of range for " + typ
		}
		return "want an integer"
	case "uint", "uint8", "uint16", "uint32", "uint64":
		if rangeErr {
			return "the number is out of range for " + typ
		}
		return "want a non-negative integer"
	case "float32", "float64":
		return "want a number"
	case "bool":
		return "want true or false"
	case "duration":
		return "want a duration such as 300ms, 1.5s or 2m"
	case "intSlice", "int32Slice", "int64Slice", "uintSlice":
		return "want comma-separated integers"
	case "float32Slice", "float64Slice":
		return "want comma-separated numbers"
	case "boolSlice":
		return "want comma-separated true or false"
	case "durationSlice":
		return "want comma-separated durations such as 300ms,1.5s"
	}
	if cause == nil {
		return "malformed"
	}
	// Sundial's own values (--timeout, --output, TextUnmarshaler fields)
	// explain themselves.
	return strings.TrimPrefix(cause.Error(), "cliadapter: ")
}

// namedString is a string flag value whose value name in help and
// completions is name (see NamedString).
type namedString struct {
	p    *string
	name string
}

// NamedString returns a string flag value over p, for use with pflag's
// Var. The help calls its value name ("--config file"):
//
//	file := "" // the default
//	cmd.Flags().Var(cliadapter.NamedString(&file, "file"), "config", "JSON config file")
//
// pflag's own way back-quotes the name in the usage text ("JSON config
// `file`"). That leaves the back quotes in the descriptions shell
// completion shows. The flag's type is then name, so read it through p,
// not FlagSet.GetString.
func NamedString(p *string, name string) pflag.Value { return &namedString{p: p, name: name} }

func (v *namedString) Set(s string) error { *v.p = s; return nil }
func (v *namedString) Type() string       { return v.name }
func (v *namedString) String() string {
	if v.p == nil {
		return ""
	}
	return *v.p
}

// completeValues returns a flag completion function offering the values
// (each "value\tdescription") that start with what was typed, and no file
// names.
func completeValues(values ...string) cobra.CompletionFunc {
	return func(_ *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		var out []cobra.Completion
		for _, v := range values {
			if strings.HasPrefix(v, toComplete) {
				out = append(out, v)
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// isTerminal reports whether w is a terminal (a character device), where
// the terminal itself echoes ^C at a Ctrl-C.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
