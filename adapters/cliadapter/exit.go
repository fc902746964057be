package cliadapter

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sundial-go/sundial/pipeline"
)

// Exit codes of the command line, one per outcome kind (the outcome table
// of docs/pipeline.md, shared with the HTTP status and the gRPC code).
const (
	ExitOK          = 0
	ExitUnexpected  = 1
	ExitValidation  = 2 // also usage errors
	ExitNotFound    = 3
	ExitDenied      = 4 // UNAUTHENTICATED and FORBIDDEN
	ExitConflict    = 5
	ExitUnavailable = 6
	ExitTimeout     = 7
	ExitCanceled    = 8 // CANCELLED
	// ExitUnprocessable: UNPROCESSABLE (an idempotency key reused with
	// another input).
	ExitUnprocessable = 9
)

// ExitCodeFor returns the process exit code of an outcome kind. A kind
// outside the closed set is UNEXPECTED.
func ExitCodeFor(k pipeline.Kind) int {
	switch k {
	case pipeline.KindOK:
		return ExitOK
	case pipeline.KindValidation:
		return ExitValidation
	case pipeline.KindUnauthenticated, pipeline.KindForbidden:
		return ExitDenied
	case pipeline.KindNotFound:
		return ExitNotFound
	case pipeline.KindConflict:
		return ExitConflict
	case pipeline.KindUnprocessable:
		return ExitUnprocessable
	case pipeline.KindCanceled:
		return ExitCanceled
	case pipeline.KindTimeout:
		return ExitTimeout
	case pipeline.KindUnavailable:
		return ExitUnavailable
	}
	return ExitUnexpected
}

// ExitError is returned by an operation command whose invocation failed.
// The failure has already been written to stderr; Code is the process exit
// code (ExitCodeFor the outcome's kind) and Err the outcome, a
// *pipeline.Error.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string {
	if e == nil {
		return "cliadapter: exit code " + strconv.Itoa(ExitUnexpected)
	}
	return "cliadapter: exit code " + strconv.Itoa(e.Code) + ": " + pipeline.ErrorText(e.Err)
}

// Unwrap returns the outcome.
func (e *ExitError) Unwrap() error {
	if e == nil {
		return nil
	}
	return e.Err
}

// exitErrorOf finds the *ExitError in err's chain. A nil *ExitError, and
// an error chain that cannot be walked (an Unwrap method that panics), is
// none.
func exitErrorOf(err error) (ee *ExitError, ok bool) {
	defer func() {
		if recover() != nil {
			ee, ok = nil, false
		}
	}()
	ee, ok = errors.AsType[*ExitError](err)
	return ee, ok && ee != nil
}

// ExitCode returns the exit code for an error returned by executing a
// command tree built with AddCommands: ExitOK for nil, the Code of an
// *ExitError, ExitUnexpected for a nil *ExitError or any other typed nil,
// and ExitValidation (a usage error) for anything else. It never panics.
func ExitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	if ee, ok := exitErrorOf(err); ok {
		return ee.Code
	}
	if isNil(err) {
		return ExitUnexpected
	}
	return ExitValidation
}

// isNil reports whether err holds a nil pointer (or another nil
// reference) of some type.
func isNil(err error) bool {
	switch v := reflect.ValueOf(err); v.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan, reflect.Interface:
		return v.IsNil()
	}
	return false
}

// Execute runs root with ctx as the commands' parent context and returns
// the process exit code: ExitOK on success; the Code of an *ExitError (a
// failed operation, already reported by the operation command); and
// ExitValidation for any other error — an unknown command or flag, a
// malformed flag value, a config that does not load — which Execute
// writes to root's stderr as "<root>: <error>" (the prefix only once),
// followed by a pointer to the command's --help. A typed nil returned as
// an error is ExitUnexpected, written without the pointer. Other commands
// of the tree that report a run-time failure themselves return an
// *ExitError with the code they want (e.g. ExitUnexpected). Execute
// silences cobra's own error and usage printing, and prints errors with
// pipeline.ErrorText, so that one whose Error method panics does not take
// the process down.
func Execute(ctx context.Context, root *cobra.Command) int {
	root.SilenceErrors, root.SilenceUsage = true, true
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return ExitOK
	}
	if _, ok := exitErrorOf(err); ok {
		return ExitCode(err)
	}
	code := ExitCode(err)
	w := root.ErrOrStderr()
	msg := pipeline.ErrorText(humanFlagError(err))
	if !strings.HasPrefix(msg, root.Name()+": ") {
		msg = root.Name() + ": " + msg
	}
	fmt.Fprintln(w, msg)
	if code == ExitValidation {
		if cmd == nil {
			cmd = root
		}
		fmt.Fprintf(w, "Run '%s --help' for usage.\n", cmd.CommandPath())
	}
	return code
}
