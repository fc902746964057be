package cliadapter

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
)

// KernelFunc returns the kernel an operation command runs on. An operation
// command calls it once per execution, after its flags are parsed, so it
// may read flags such as the application's --config; when they do not
// parse it is called too, to observe the usage error, and its own error is
// then ignored. An error, or a nil kernel, is reported like a usage error
// (exit code 2).
type KernelFunc func() (*kernel.Kernel, error)

// Option configures AddCommands.
type Option interface{ apply(*options) }

type optionFunc func(*options)

func (f optionFunc) apply(o *options) { f(o) }

type options struct {
	signals []os.Signal
	exit    func(int)
	// signalCh replaces the OS as the source of signals (tests).
	signalCh <-chan os.Signal
	// terminal reports whether stderr is a terminal (isTerminal; tests
	// replace it).
	terminal func(io.Writer) bool
}

// withTerminal makes operation commands take stderr for a terminal, or
// not (tests).
func withTerminal(tty bool) Option {
	return optionFunc(func(o *options) { o.terminal = func(io.Writer) bool { return tty } })
}

// WithSignals sets the signals that cancel a running operation. The
// default is os.Interrupt (Ctrl-C) and syscall.SIGTERM. The first signal
// cancels the invocation's parent context: the command reports CANCELLED
// (exit code 8) at once, even when the handler ignores its context, or
// TIMEOUT (7) when the deadline had already fired; a command reading
// --input - stops waiting for standard input at the first signal too. A
// second signal while the command still runs (building the kernel, say)
// exits the process at once (see WithExit). WithSignals() with no signals
// leaves signal handling to the host.
func WithSignals(sigs ...os.Signal) Option {
	return optionFunc(func(o *options) { o.signals = slices.Clone(sigs) })
}

// WithExit sets the function called with ExitCanceled when a second
// signal arrives while an operation is still running. The default is
// os.Exit. A nil function is ignored.
func WithExit(exit func(code int)) Option {
	return optionFunc(func(o *options) {
		if exit != nil {
			o.exit = exit
		}
	})
}

// withSignalChannel makes operation commands read signals from ch instead
// of the OS (tests).
func withSignalChannel(ch <-chan os.Signal) Option {
	return optionFunc(func(o *options) { o.signalCh = ch })
}

// AddCommands adds the operations of reg to root as commands, one group per
// first segment of the operation ID and one command per operation under it:
// "orders.create" becomes "root orders create" and "inventory.v2.reserve"
// becomes "root inventory v2.reserve". The descriptors of reg give the
// commands' help and flags; the operations run on the kernel newKernel
// returns, by ID (an ID the kernel does not serve is NOT_FOUND, exit 3).
//
// Each operation command has:
//
//   - one flag per input field whose type pflag parses (strings, booleans,
//     integers, floats, time.Duration, []string, []int, pointers to these,
//     and encoding.TextUnmarshaler types), named by FlagName of the field's
//     JSON name ("delayMs" -> --delay-ms);
//   - --input JSON, the whole input as a JSON object, or --input - to read
//     it from standard input. The document is decoded first and the flags
//     given explicitly then override the fields they name. Unknown fields,
//     trailing data and type mismatches are VALIDATION failures (exit 2).
//     Standard input is read within the invocation's effective deadline
//     and until the first signal: a stdin that has not ended by then fails
//     the call with TIMEOUT (exit 7) or CANCELLED (8), while the read,
//     which cannot be interrupted, stays blocked on a goroutine of its own
//     until stdin yields or the process exits;
//   - the group's persistent flags --timeout SECONDS (the invocation's
//     deadline, see ParseTimeout; capped like every inbound deadline by the
//     operation's TimeoutSeconds and Sundial.Kernel.MaxTimeoutSeconds) and
//     --output json|text (the result's format on stdout, JSON by default).
//
// The command only decodes and encodes: it hands the decoded input (for
// --input -, a decoder the kernel calls once it has computed the effective
// deadline, kernel.Request.Decode), the --timeout deadline and a context
// that SIGINT and SIGTERM cancel to the kernel (kernel.Kernel.Handle,
// protocol CLI), which computes the effective deadline, runs the
// operation's pipeline and observes the call. The outcome is reported by
// the deadline whatever the handler does: the command fails with TIMEOUT
// (exit code 7) at the deadline, or CANCELLED (8) at the first signal,
// while a handler that ignores its context runs on until it returns or the
// process exits (see kernel.Kernel.Wait). On an operation that takes
// idempotency keys whose records outlive the process (Redis,
// kernel.Kernel.IdempotencyOutlivesProcess), a key is generated when
// --idempotency-key is absent, printed with a TIMEOUT or CANCELLED failure
// with a rerun line, and the command, the failure printed, waits for the
// running call (at most the store's lease; a signal stops the waiting) so
// that its outcome is stored under the key before the process exits. With
// the in-process store no key is generated: the records die with the
// command. An input that does not decode
// and a malformed flag or argument are handed to the kernel as rejections
// (kernel.Request.Reject), so that they too are observed (span, metrics,
// access log) before they are reported.
//
// A success writes the result to the command's stdout and returns nil. A
// failure writes RFC 9457 Problem Details JSON and a human line to stderr
// (only the line with --output text) and returns an *ExitError whose Code
// is ExitCodeFor the outcome's kind. Usage errors (an unknown or malformed
// flag, a positional argument) are returned as they are, for Execute to
// print. Run the root with Execute to turn errors into exit codes.
//
// AddCommands returns an error, adding nothing, when a group's name is
// already a command of root. Like any cobra tree, the commands keep the
// flag values they parsed: execute a tree once, and build a new root for
// each further execution (tests, in-process callers).
func AddCommands(root *cobra.Command, reg *operations.Registry, newKernel KernelFunc, opts ...Option) error {
	if root == nil || reg == nil || newKernel == nil {
		return errors.New("cliadapter: AddCommands: nil root, registry or kernel function")
	}
	o := &options{signals: []os.Signal{os.Interrupt, syscall.SIGTERM}, exit: os.Exit, terminal: isTerminal}
	for _, opt := range opts {
		if opt != nil {
			opt.apply(o)
		}
	}
	var groups []*cobra.Command
	type groupCmd struct {
		cmd   *cobra.Command
		flags *groupFlags
	}
	byName := map[string]groupCmd{}
	for _, d := range reg.All() {
		group, name, _ := strings.Cut(d.ID, ".")
		g, ok := byName[group]
		if !ok {
			for _, c := range root.Commands() {
				if c.Name() == group {
					return fmt.Errorf("cliadapter: operation group %q clashes with the command %q", group, c.CommandPath())
				}
			}
			g.flags = &groupFlags{}
			g.cmd = newGroupCommand(group, g.flags)
			byName[group] = g
			groups = append(groups, g.cmd)
		}
		g.cmd.AddCommand(newOperationCommand(d, name, g.flags, newKernel, o))
	}
	for _, g := range groups {
		g.Short = fmt.Sprintf("Operations %s.*: %s.", g.Name(), strings.Join(commandNames(g), ", "))
	}
	root.AddCommand(groups...)
	return nil
}

func commandNames(c *cobra.Command) []string {
	var names []string
	for _, sub := range c.Commands() {
		if sub.IsAvailableCommand() {
			names = append(names, sub.Name())
		}
	}
	return names
}

// groupFlags are the persistent flags of a group, shared by its operation
// commands.
type groupFlags struct {
	timeout timeoutValue
	output  outputValue
}

func newGroupCommand(name string, gf *groupFlags) *cobra.Command {
	g := &cobra.Command{
		Use:                        name,
		SuggestionsMinimumDistance: 2,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return cmd.Help()
			}
			msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
			if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
				msg += "; did you mean " + strings.Join(s, " or ") + "?"
			}
			return errors.New(msg)
		},
	}
	pf := g.PersistentFlags()
	pf.Var(&gf.timeout, "timeout", "deadline of the invocation in seconds (> 0, fractions allowed); capped by the configured maximum")
	pf.Var(&gf.output, "output", "result format on stdout: json or text")
	// Errors only when the flags do not exist, which they do.
	_ = g.RegisterFlagCompletionFunc("output", completeValues(
		OutputJSON+"\tthe result as indented JSON (default)",
		OutputText+"\tone line per field"))
	_ = g.RegisterFlagCompletionFunc("timeout", completeValues())
	return g
}

func newOperationCommand(d *operations.Descriptor, name string, gf *groupFlags, newKernel KernelFunc, o *options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   name + " [flags]",
		Short: d.Summary,
	}
	// Usage errors of an operation command are rejected through the kernel,
	// so that they are observed, and then reported by Execute as usual.
	cmd.Args = func(c *cobra.Command, args []string) error {
		if err := cobra.NoArgs(c, args); err != nil {
			rejectUsage(c, d.ID, newKernel, err)
			return err
		}
		return nil
	}
	cmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		err = humanFlagError(err)
		rejectUsage(c, d.ID, newKernel, err)
		return err
	})
	inputJSON := new(string)
	cmd.Flags().Var(NamedString(inputJSON, "object"), "input", "the whole input as a JSON object, or - to read it from standard input; flags given too override its fields")
	_ = cmd.RegisterFlagCompletionFunc("input", completeValues("-\tread the JSON object from standard input"))
	fields := newInputFlags(d.Input, cmd.Flags())
	fields.policy = d.InputPolicy
	var idemKey *string
	if cmd.Flags().Lookup(flagIdempotencyKey) == nil {
		idemKey = cmd.Flags().String(flagIdempotencyKey, "",
			"idempotency key of this call (1 to 255 printable ASCII characters); with records in a shared store (Redis), one is generated when absent on an operation that takes keys and printed with a TIMEOUT or CANCELLED failure, so that a rerun with it gets this call's outcome")
	}
	cmd.Long = operationHelp(d, fields)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		r := &runner{cmd: cmd, desc: d, format: gf.output.get()}
		if idemKey != nil {
			r.idemKey = *idemKey
		}
		return r.run(fields, *inputJSON, gf.timeout, newKernel, o)
	}
	return cmd
}

func operationHelp(d *operations.Descriptor, f *inputFlags) string {
	var b strings.Builder
	if d.Summary != "" {
		b.WriteString(d.Summary + "\n\n")
	}
	fmt.Fprintf(&b, "Runs the operation %s in-process.\n\n", d.ID)
	b.WriteString("Input fields are set with the flags below, or all at once as a JSON object with\n" +
		"--input '{...}' (--input - reads it from standard input); a flag given\n" +
		"together with --input overrides that field.\n")
	if len(f.inputOnly) > 0 {
		fmt.Fprintf(&b, "Fields settable with --input only: %s.\n", strings.Join(f.inputOnly, ", "))
	}
	b.WriteString("\nThe result is written to stdout; a failure writes Problem Details JSON and\n" +
		"a line to stderr. Exit codes: 0 OK, 1 UNEXPECTED, 2 VALIDATION or usage error,\n" +
		"3 NOT_FOUND, 4 UNAUTHENTICATED or FORBIDDEN, 5 CONFLICT, 6 UNAVAILABLE,\n" +
		"7 TIMEOUT, 8 CANCELLED (Ctrl-C; a second Ctrl-C exits at once),\n" +
		"9 UNPROCESSABLE (an idempotency key reused with another input).")
	return b.String()
}

// runner runs one operation command.
type runner struct {
	cmd    *cobra.Command
	desc   *operations.Descriptor
	format string
	stderr *syncWriter // shared with the signal watcher
	// idemKey is --idempotency-key, or the key generated for an operation
	// that takes keys when its records outlive the process.
	idemKey string
	// keyed: the operation takes keys and idemKey is a valid one, so that
	// the call's outcome is recorded under it; shared: the record outlives
	// the process (a store with a lease: Redis), so a rerun can find it.
	keyed, shared bool
}

// flagIdempotencyKey is the flag of the caller's idempotency key.
const flagIdempotencyKey = "idempotency-key"

// newIdempotencyKey returns a fresh random key (128 bits, hex).
func newIdempotencyKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// syncWriter serialises writes to a writer that two goroutines share.
type syncWriter struct {
	mu sync.Mutex // guards w
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// run runs the operation once: it watches for signals, builds the kernel
// and the request, has the kernel handle it and reports the outcome.
func (r *runner) run(fields *inputFlags, inputJSON string, timeout timeoutValue, newKernel KernelFunc, o *options) error {
	r.stderr = &syncWriter{w: r.cmd.ErrOrStderr()}
	// On a terminal, which echoes ^C without a newline, what follows a
	// signal starts on a line of its own.
	tty := o.terminal(r.stderr.w)
	in := r.watchSignals(o, tty)
	defer in.stop()

	k, err := kernelOf(newKernel)
	if err != nil {
		return err
	}
	// What the kernel holds outside the process (a Redis client, this
	// replica in the cluster count) goes when the command ends.
	defer k.Close()
	now := time.Now()
	req := kernel.Request{Operation: r.desc.ID, Protocol: pipeline.ProtocolCLI, Arrival: now}
	r.setIdempotencyKey(k, &req)
	if timeout.set {
		req.Deadline = now.Add(timeout.d)
	}
	r.setInput(&req, fields, inputJSON, in)
	return r.report(k, k.Handle(in.ctx, req), in, tty)
}

// watchSignals starts watching the signals of o: the first cancels the
// call, the second exits at once (WithExit) with a line on stderr.
func (r *runner) watchSignals(o *options, tty bool) *interrupts {
	onSecond := func(sig os.Signal) {
		if tty {
			writeStr(r.stderr, "\n")
		}
		fmt.Fprintf(r.stderr, "%s: %v again, exiting at once\n", r.cmd.CommandPath(), sig)
		o.exit(ExitCanceled)
	}
	if o.signalCh != nil {
		return watch(r.cmd.Context(), o.signalCh, onSecond, func() {})
	}
	return notify(r.cmd.Context(), onSecond, o.signals...)
}

// setIdempotencyKey puts the caller's idempotency key in req, generating
// one where a rerun can use it, and rejects a malformed key on an
// operation that takes keys. It sets r.keyed and r.shared.
func (r *runner) setIdempotencyKey(k *kernel.Kernel, req *kernel.Request) {
	// A key is generated only where a rerun can use it: when the records
	// outlive this process. An in-process store dies with the command,
	// which makes one call: a generated key would protect nothing.
	enabled, shared := k.IdempotencyPolicy(r.desc.ID).Enabled, k.IdempotencyOutlivesProcess()
	if r.idemKey == "" && enabled && shared {
		r.idemKey = newIdempotencyKey()
	}
	if r.idemKey == "" {
		return
	}
	valid := pipeline.ValidIdempotencyKey(r.idemKey)
	if !valid && enabled {
		req.Reject = pipeline.ErrIdempotencyKeyMalformed()
	}
	if valid {
		req.IdempotencyKey = r.idemKey
	}
	r.keyed, r.shared = valid && enabled, valid && enabled && shared
}

// setInput puts the operation's input in req: decoded from the flags and
// --input now, or, for --input -, a Decode that reads standard input when
// the kernel decodes the call. A malformed input rejects the call.
func (r *runner) setInput(req *kernel.Request, fields *inputFlags, inputJSON string, in *interrupts) {
	flags := r.cmd.Flags()
	if flags.Changed("input") && inputJSON == "-" {
		// Standard input is read when the kernel decodes the call, bounded
		// by the effective deadline it computed (--timeout capped by the
		// operation's TimeoutSeconds and the kernel's maximum) and by the
		// first signal: a stdin that never ends is TIMEOUT or CANCELLED,
		// observed like any other outcome.
		stdin := r.cmd.InOrStdin()
		req.Decode = func(deadline time.Time) (any, error) {
			return decodeStdin(in, stdin, deadline, fields, flags)
		}
		return
	}
	var raw []byte
	var err error
	if flags.Changed("input") {
		if raw, err = readInput(inputJSON, nil); err != nil {
			req.Reject = inputFailure(err)
		}
	}
	if req.Reject == nil {
		if req.Input, err = fields.decode(flags, raw); err != nil {
			req.Reject = inputFailure(err)
		}
	}
}

// decodeStdin reads the --input document from stdin, by deadline and
// until the first signal, and decodes it with the flags.
func decodeStdin(in *interrupts, stdin io.Reader, deadline time.Time, fields *inputFlags, flags *pflag.FlagSet) (any, error) {
	raw, err := readStdin(in.ctx, stdin, deadline)
	if err != nil {
		if pe, ok := err.(*pipeline.Error); ok {
			return nil, pe
		}
		return nil, inputFailure(err)
	}
	input, err := fields.decode(flags, raw)
	if err != nil {
		return nil, inputFailure(err)
	}
	return input, nil
}

// report reports the outcome out and returns the command's error: a
// failure's message (then, after a TIMEOUT or CANCELLED whose key a rerun
// needs, waiting for the running call), or the output. The reply's notes
// follow a failure's message and precede the output.
func (r *runner) report(k *kernel.Kernel, out kernel.Outcome, in *interrupts, tty bool) error {
	if out.Err != nil {
		if _, ok := context.Cause(in.ctx).(*SignalError); ok && tty {
			writeStr(r.stderr, "\n") // after the terminal's ^C
		}
		err := r.fail(out.Err, out.TraceID)
		r.sendReply(out.Invocation)
		if kind := pipeline.KindOf(out.Err); r.shared && (kind == pipeline.KindTimeout || kind == pipeline.KindCanceled) {
			r.awaitOutcome(k, kind, in)
		}
		return err
	}
	r.sendReply(out.Invocation)
	if err := writeResult(r.cmd.OutOrStdout(), r.format, out.Output); err != nil {
		return r.fail(pipeline.Wrap(pipeline.KindUnexpected, pipeline.CodeUnexpected, pipeline.UnexpectedMessage,
			fmt.Errorf("cliadapter: writing the result of %s: %w", r.desc.ID, err)), out.TraceID)
	}
	return nil
}

// sendReply prints the notes of the invocation's reply on stderr, one a
// line.
func (r *runner) sendReply(inv *pipeline.Invocation) {
	for _, line := range append(inv.Reply().Notes(), r.legacyNotes(inv)...) {
		writeStr(r.stderr, line+"\n")
	}
}

// legacyNotes returns the note of the invocation's old replay mark
// (Invocation.Replayed), unless its Reply carries the mark
// (pipeline.FieldReplayed) and so its own note.
//
// transitional: removed when the writers move
func (r *runner) legacyNotes(inv *pipeline.Invocation) []string {
	if !inv.Replayed() {
		return nil
	}
	if _, ok := inv.Reply().Get(pipeline.FieldReplayed); ok {
		return nil
	}
	// The stored outcome of an earlier call with the same idempotency
	// key (docs/idempotency.md).
	return []string{"replayed: the stored outcome of an earlier call with idempotency key " + r.idemKey}
}

// awaitOutcome is called after a TIMEOUT or CANCELLED failure (kind) of a
// call whose key's record outlives the process, once the failure has been
// reported: the handler may still run (a straggler), and its outcome is
// stored under the key only when it returns, which it can do only while
// the process lives. So the command waits for it — at most the store's
// lease, after which a vanished holder's key is free anyway — before it
// closes the kernel and exits with the failure's code. A signal stops the
// waiting: the first one after a TIMEOUT, and after a CANCELLED (a signal
// already) the second, which exits at once (WithExit).
func (r *runner) awaitOutcome(k *kernel.Kernel, kind pipeline.Kind, in *interrupts) {
	if k.Running() == 0 {
		return // the call never started, or has returned: its outcome is stored
	}
	lease := k.IdempotencyStore().Lease()
	parent := in.ctx
	if kind == pipeline.KindCanceled || parent.Err() != nil {
		parent = context.WithoutCancel(parent)
	}
	ctx, cancel := context.WithTimeout(parent, lease)
	defer cancel()
	fmt.Fprintf(r.stderr, "waiting for the running call to finish, so that its outcome is stored under the key (at most %s; Ctrl-C stops waiting)\n", lease)
	if err := k.Wait(ctx); err != nil {
		fmt.Fprintf(r.stderr, "stopped waiting: the call still runs; its key is free again once its lease (%s) ends, and a rerun then runs the operation again\n", lease)
	}
}

// kernelOf calls newKernel, turning a nil kernel, and a typed nil
// returned as its error (which cobra could not inspect safely), into an
// error of our own.
func kernelOf(newKernel KernelFunc) (*kernel.Kernel, error) {
	k, err := newKernel()
	switch {
	case err != nil && isNil(err):
		return nil, fmt.Errorf("cliadapter: the kernel function returned a nil %T as its error", err)
	case err != nil:
		return nil, err
	case k == nil:
		return nil, errors.New("cliadapter: the kernel function returned no kernel")
	}
	return k, nil
}

// rejectUsage hands the usage error err of the operation command cmd (a
// malformed flag, a positional argument) to the kernel as a rejected call
// of the operation id, so that it is observed like any other outcome. The
// caller reports err itself, as a usage error. When the kernel cannot be
// built, nothing is observed: the usage error is reported all the same.
func rejectUsage(cmd *cobra.Command, id string, newKernel KernelFunc, err error) {
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
	k.Handle(ctx, kernel.Request{Operation: id, Protocol: pipeline.ProtocolCLI, Reject: usageFailure(err)})
}

// usageFailure turns a usage error into a VALIDATION outcome (CodeUsage).
func usageFailure(err error) *pipeline.Error {
	return pipeline.Wrap(pipeline.KindValidation, CodeUsage, strings.TrimPrefix(pipeline.ErrorText(err), "cliadapter: "), err)
}

// inputFailure turns a --input decoding error into a VALIDATION outcome
// (CodeMalformedInput or CodeWrongInput).
func inputFailure(err error) *pipeline.Error {
	if pe, ok := errors.AsType[*pipeline.Error](err); ok {
		return pe // the input policy's answer (operations.CheckJSON)
	}
	ie, ok := errors.AsType[*InputError](err)
	if !ok || ie == nil {
		return pipeline.Wrap(pipeline.KindValidation, CodeMalformedInput, "The --input document is malformed.", err)
	}
	code := CodeMalformedInput
	if ie.Misfit {
		code = CodeWrongInput
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
	if _, ok := pe.Detail("idempotencyKey"); ok {
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

// writeStr writes s to w, ignoring errors: stderr has nowhere to report
// its own failure.
func writeStr(w io.Writer, s string) { _, _ = io.WriteString(w, s) }
