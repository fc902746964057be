package cliadapter

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sundial-go/sundial/adapters/internal/outcome"
	"github.com/sundial-go/sundial/pipeline"
)

// Exit codes of the command line, one per outcome kind (the outcome table
// of docs/pipeline.md, shared with the HTTP status and the gRPC code).
const (
	exitOK          = 0
	exitUnexpected  = 1
	exitValidation  = 2 // also usage errors
	exitNotFound    = 3
	exitDenied      = 4 // UNAUTHENTICATED and FORBIDDEN
	exitConflict    = 5
	exitUnavailable = 6
	exitTimeout     = 7
	exitCanceled    = 8 // CANCELLED
	// exitUnprocessable: UNPROCESSABLE (an idempotency key reused with
	// another input).
	exitUnprocessable = 9
)

// exitCodes is the outcome table's exit-code column.
var exitCodes = outcome.NewTable(exitUnexpected, map[pipeline.Kind]int{
	pipeline.KindOK:              exitOK,
	pipeline.KindValidation:      exitValidation,
	pipeline.KindUnauthenticated: exitDenied,
	pipeline.KindForbidden:       exitDenied,
	pipeline.KindNotFound:        exitNotFound,
	pipeline.KindConflict:        exitConflict,
	pipeline.KindUnprocessable:   exitUnprocessable,
	pipeline.KindCanceled:        exitCanceled,
	pipeline.KindTimeout:         exitTimeout,
	pipeline.KindUnavailable:     exitUnavailable,
}, nil)

// ExitCodeFor returns the process exit code of an outcome kind. A kind
// outside the closed set is UNEXPECTED.
func ExitCodeFor(k pipeline.Kind) int {
	return exitCodes.For(k)
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
		return "cliadapter: exit code " + strconv.Itoa(exitUnexpected)
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

// exitCode returns the exit code for an error returned by executing a
// command tree built with AddCommands: 0 for nil, the Code of an
// *ExitError, 1 (UNEXPECTED) for a nil *ExitError or any other typed nil,
// and 2 (VALIDATION, a usage error) for anything else. It never panics.
func exitCode(err error) int {
	if err == nil {
		return exitOK
	}
	if ee, ok := exitErrorOf(err); ok {
		return ee.Code
	}
	if isNil(err) {
		return exitUnexpected
	}
	return exitValidation
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

// Execute runs root with ctx as the commands' parent context. It returns
// the process exit code.
//   - 0 on success.
//   - The Code of an *ExitError: a failed operation, already reported by
//     the operation command.
//   - 2 (VALIDATION) for any other error, such as an unknown command or
//     flag, a malformed flag value or a config that does not load. Execute
//     writes it to root's stderr as "<root>: <error>", the prefix once,
//     and then a pointer to the command's --help.
//   - 1 (UNEXPECTED) for a typed nil returned as an error, written without
//     the pointer.
//
// Other commands of the tree that report a failure themselves return an
// *ExitError with the code they want. Execute silences cobra's own error
// and usage printing. It prints errors with pipeline.ErrorText, so one
// whose Error method panics does not take the process down.
func Execute(ctx context.Context, root *cobra.Command) int {
	root.SilenceErrors, root.SilenceUsage = true, true
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return exitOK
	}
	if _, ok := exitErrorOf(err); ok {
		return exitCode(err)
	}
	code := exitCode(err)
	w := root.ErrOrStderr()
	msg := pipeline.ErrorText(humanFlagError(err))
	if !strings.HasPrefix(msg, root.Name()+": ") {
		msg = root.Name() + ": " + msg
	}
	fmt.Fprintln(w, msg)
	if code == exitValidation {
		if cmd == nil {
			cmd = root
		}
		fmt.Fprintf(w, "Run '%s --help' for usage.\n", cmd.CommandPath())
	}
	return code
}
