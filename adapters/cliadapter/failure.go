package cliadapter

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/pipeline"
)

// This file turns failures into outcomes and reports them on stderr.

// rejectUsage hands the usage error err of the operation command cmd (a
// malformed flag, a positional argument) to the kernel as a rejected call
// of the operation id, so that it is observed like any other outcome. The
// caller reports err itself, as a usage error. When the kernel cannot be
// built, nothing is observed: the usage error is reported all the same.
func rejectUsage(cmd *cobra.Command, id string, newKernel kernelFunc, err error) {
	if errors.Is(err, pflag.ErrHelp) {
		return
	}
	k, kerr := kernelOf(newKernel)
	if kerr != nil {
		return
	}
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	c := kernel.Caller{Protocol: pipeline.ProtocolCLI}
	if op := opFor(k, id); op != nil {
		op.Reject(ctx, c, usageFailure(err))
		return
	}
	c.Route = id
	k.Reject(ctx, c, usageFailure(err))
}

// usageFailure turns a usage error into a VALIDATION outcome (codeUsage).
func usageFailure(err error) *pipeline.Error {
	return pipeline.Wrap(pipeline.KindValidation, codeUsage, strings.TrimPrefix(pipeline.ErrorText(err), "cliadapter: "), err)
}

// inputFailure turns a --input decoding error into a VALIDATION outcome
// (codeMalformedInput or codeWrongInput).
func inputFailure(err error) *pipeline.Error {
	if pe, ok := errors.AsType[*pipeline.Error](err); ok {
		return pe // the input policy's answer (operations.CheckJSON)
	}
	ie, ok := errors.AsType[*inputError](err)
	if !ok || ie == nil {
		return pipeline.Wrap(pipeline.KindValidation, codeMalformedInput, "The --input document is malformed.", err)
	}
	code := codeMalformedInput
	if ie.Misfit {
		code = codeWrongInput
	}
	pe := pipeline.Wrap(pipeline.KindValidation, code, strings.TrimPrefix(ie.Error(), "cliadapter: "), err)
	if ie.Field != "" {
		pe = pe.WithDetail("field", ie.Field)
	}
	return pe
}

// fail reports a failed invocation on stderr and returns the *ExitError
// for it.
func (r *runner) fail(err error, traceID string) error {
	pe := pipeline.AsError(err)
	if k := pe.Kind(); r.keyed && (k == pipeline.KindTimeout || k == pipeline.KindCanceled) {
		// The key goes with a failure after which the operation may have
		// run on (exit 7, exit 8).
		pe = pe.WithDetail("idempotencyKey", r.idemKey)
	}
	writeProblem(r.stderr, r.format, r.cmd.CommandPath(), r.desc.ID, pe, traceID)
	r.logUnexpected(pe, traceID)
	if _, ok := pe.Details()["idempotencyKey"]; ok {
		if r.shared {
			// The record outlives the process, and the command waits for the
			// running call's outcome before it exits (awaitOutcome).
			// Whether the outcome will be stored is not known yet: a
			// handler that stops on its context's end frees the key.
			fmt.Fprintf(r.stderr, "rerun with --%s %s to get this call's outcome instead of running it again, once it has finished; "+
				"a call that stopped without its effect (it returned TIMEOUT, CANCELLED or UNAVAILABLE, or never started) leaves the key free, and a rerun runs it\n",
				flagIdempotencyKey, r.idemKey)
		} else {
			fmt.Fprintf(r.stderr, "note: this command keeps idempotency records in its own process only (no shared store such as Redis), "+
				"so a rerun with --%s %s runs the operation again; only the services it called, which received the key, can recognise it\n",
				flagIdempotencyKey, r.idemKey)
		}
	}
	return &ExitError{Code: ExitCodeFor(pe.Kind()), Err: pe}
}

// logUnexpected logs the cause of an UNEXPECTED outcome, which the Problem
// Details on stderr do not show, at Error on the kernel's logger. It
// follows the Problem Details, so that they stay stderr's first line.
func (r *runner) logUnexpected(pe *pipeline.Error, traceID string) {
	if r.logger == nil || pe.Kind() != pipeline.KindUnexpected {
		return
	}
	ctx := r.cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	r.logger.LogAttrs(ctx, slog.LevelError, "cli command",
		slog.String("operation", r.desc.ID),
		slog.String("command", r.cmd.CommandPath()),
		slog.String("code", pe.Code()),
		slog.String("traceId", traceID),
		slog.String("error", pipeline.ErrorText(pe)))
}

// writeStr writes s to w, ignoring errors: stderr has nowhere to report
// its own failure.
func writeStr(w io.Writer, s string) { _, _ = io.WriteString(w, s) }
