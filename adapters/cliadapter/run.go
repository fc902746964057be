package cliadapter

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.opentelemetry.io/otel/baggage"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
)

// This file runs one operation command: its signals, its request and the
// report of its outcome.

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
	// baggage is --baggage, in the W3C baggage header's format.
	baggage string
	// priority is --priority, as given ("": none).
	priority string
	// logger is the kernel's: it gets the cause of an UNEXPECTED outcome.
	logger *slog.Logger
	// op is the operation's handle in the kernel of this run (nil: the
	// kernel does not serve it).
	op *kernel.Op
}

// flagBaggage is the flag of the call's W3C baggage.
const flagBaggage = "baggage"

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
func (r *runner) run(fields *inputFlags, inputJSON string, timeout timeoutValue, newKernel kernelFunc, o *options) error {
	r.stderr = &syncWriter{w: r.cmd.ErrOrStderr()}
	// On a terminal, which echoes ^C without a newline, what follows a
	// signal starts on a line of its own.
	tty := o.terminal(r.stderr.w)
	in := r.watchSignals(o, tty)
	defer in.stop()

	k, err := r.kernelUnlessSignalled(newKernel, in)
	if err != nil {
		return err
	}
	// What the kernel holds outside the process (a Redis client, this
	// replica in the cluster count) goes when the command ends.
	defer k.Close()
	r.logger = k.Logger()
	r.op = opFor(k, r.desc.ID)
	now := time.Now()
	u := kernel.Unary{Caller: kernel.Caller{Protocol: pipeline.ProtocolCLI, Arrival: now, Priority: r.priority}}
	r.setIdempotencyKey(&u.Caller)
	if timeout.set {
		u.Deadline = now.Add(timeout.d)
	}
	reject := r.setInput(&u, fields, inputJSON, in)
	ctx, reject := r.withBaggage(in.ctx, reject)
	var out kernel.Outcome
	switch {
	case r.op == nil:
		out = k.Reject(ctx, kernel.Caller{Protocol: pipeline.ProtocolCLI, Route: r.desc.ID}, notServed(r.desc.ID))
	case reject != nil:
		out = r.op.Reject(ctx, u.Caller, reject)
	case r.desc.Kind() != operations.Unary:
		out = r.stream(ctx, u, fields)
	default:
		out = r.op.Handle(ctx, u)
	}
	return r.report(k, out, in, tty)
}

// opFor returns the handle of the operation id in k, or nil when k does
// not serve it. The commands are built before any kernel exists, so the
// handle is found once per run.
func opFor(k *kernel.Kernel, id string) *kernel.Op {
	for _, op := range k.Operations() {
		if op.Descriptor().ID == id {
			return op
		}
	}
	return nil
}

// notServed is the outcome of a command whose operation the kernel does
// not serve: NOT_FOUND, as the kernel answers a call by an unknown ID.
func notServed(id string) *pipeline.Error {
	return pipeline.NewError(pipeline.KindNotFound, "KERNEL_NOT_FOUND_001",
		fmt.Sprintf("Operation '%s' is not registered.", id)).WithDetail("id", id)
}

// watchSignals starts watching the signals of o: the first cancels the
// call, the second exits at once (withExit) with a line on stderr.
func (r *runner) watchSignals(o *options, tty bool) *interrupts {
	onSecond := func(sig os.Signal) {
		if tty {
			writeStr(r.stderr, "\n")
		}
		fmt.Fprintf(r.stderr, "%s: %v again, exiting at once\n", r.cmd.CommandPath(), sig)
		o.exit(exitCanceled)
	}
	if o.signalCh != nil {
		return watch(r.cmd.Context(), o.signalCh, onSecond, func() {})
	}
	return notify(r.cmd.Context(), onSecond, o.signals...)
}

// withBaggage returns ctx carrying --baggage, which the kernel bounds and
// puts in the invocation as it does a header's. A malformed value rejects
// the call (VALIDATION, exit 2) unless reject already does.
func (r *runner) withBaggage(ctx context.Context, reject error) (context.Context, error) {
	if r.baggage == "" {
		return ctx, reject
	}
	b, err := baggage.Parse(r.baggage)
	if err != nil {
		if reject == nil {
			reject = pipeline.NewError(pipeline.KindValidation, pipeline.CodeValidation,
				fmt.Sprintf("The --%s flag is malformed: want name=value members separated by commas (W3C baggage).", flagBaggage)).
				WithDetail("field", "--"+flagBaggage)
		}
		return ctx, reject
	}
	return baggage.ContextWithBaggage(ctx, b), reject
}

// setIdempotencyKey puts the caller's idempotency key in c, generating
// one where a rerun can use it. The kernel rejects a malformed key on an
// operation that takes keys. It sets r.keyed and r.shared; report clears
// them when the kernel dropped the key.
func (r *runner) setIdempotencyKey(c *kernel.Caller) {
	if r.op == nil {
		return
	}
	// A key is generated only where a rerun can use it: when the records
	// outlive this process. An in-process store dies with the command,
	// which makes one call: a generated key would protect nothing. Records
	// outlive the process in a store with a lease, such as Redis.
	pol, lease := r.op.Idempotency()
	enabled, shared := pol.Enabled, lease > 0
	if r.idemKey == "" && enabled && shared {
		r.idemKey = newIdempotencyKey()
	}
	if r.idemKey == "" {
		return
	}
	c.IdempotencyKey = r.idemKey
	r.keyed, r.shared = enabled, enabled && shared
}

// setInput puts the operation's input in u: decoded from the flags and
// --input now, or, for --input -, a Decode that reads standard input when
// the kernel decodes the call. It returns the rejection of a malformed
// input.
func (r *runner) setInput(u *kernel.Unary, fields *inputFlags, inputJSON string, in *interrupts) (reject error) {
	flags := r.cmd.Flags()
	if k := r.desc.Kind(); k == operations.ClientStream || k == operations.BidiStream {
		if flags.Changed("input") {
			return inputFailure(&inputError{Msg: "a " + k.String() + " reads its inputs from standard input, one JSON line each"})
		}
		return nil
	}
	if flags.Changed("input") && inputJSON == "-" {
		// Standard input is read when the kernel decodes the call, bounded
		// by the effective deadline it computed (--timeout capped by the
		// operation's TimeoutSeconds and the kernel's maximum) and by the
		// first signal: a stdin that never ends is TIMEOUT or CANCELLED,
		// observed like any other outcome.
		stdin := r.cmd.InOrStdin()
		u.Decode = func(deadline time.Time) (any, error) {
			return decodeStdin(in, stdin, deadline, fields, flags)
		}
		return nil
	}
	var raw []byte
	var err error
	if flags.Changed("input") {
		if raw, err = readInput(inputJSON, nil); err != nil {
			return inputFailure(err)
		}
	}
	if u.Input, err = fields.decode(flags, raw); err != nil {
		return inputFailure(err)
	}
	return nil
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
	if out.Invocation == nil || out.Invocation.IdempotencyKey() != r.idemKey {
		r.keyed, r.shared = false, false // the kernel dropped a malformed key
	}
	if out.Err != nil {
		if _, ok := context.Cause(in.ctx).(*signalError); ok && tty {
			writeStr(r.stderr, "\n") // after the terminal's ^C
		}
		err := r.fail(out.Err, out.TraceID)
		r.sendReply(out.Invocation)
		if kind := pipeline.AsError(out.Err).Kind(); r.shared && (kind == pipeline.KindTimeout || kind == pipeline.KindCanceled) {
			r.awaitOutcome(k, kind, in)
		}
		return err
	}
	r.sendReply(out.Invocation)
	if k := r.desc.Kind(); k == operations.ServerStream || k == operations.BidiStream {
		return nil // the messages went to stdout
	}
	if err := writeResult(r.cmd.OutOrStdout(), r.format, out.Output); err != nil {
		return r.fail(pipeline.Wrap(pipeline.KindUnexpected, pipeline.CodeUnexpected, pipeline.UnexpectedMessage,
			fmt.Errorf("cliadapter: writing the result of %s: %w", r.desc.ID, err)), out.TraceID)
	}
	return nil
}

// sendReply prints the notes of the invocation's reply on stderr, one a
// line.
func (r *runner) sendReply(inv *pipeline.Invocation) {
	for _, line := range inv.Reply().Notes() {
		writeStr(r.stderr, line+"\n")
	}
}

// awaitOutcome is called after a TIMEOUT or CANCELLED failure (kind) of a
// call whose key's record outlives the process. The failure has been
// reported, but the handler may still run. Its outcome is stored under the
// key only when it returns, which it can do only while the process lives.
// So the command waits for it, at most the store's lease. After that, a
// vanished holder's key is free anyway. Then it closes the kernel and
// exits with the failure's code. A signal stops the waiting: the first one
// after a TIMEOUT. After a CANCELLED, a signal already, it is the second,
// which exits at once (withExit).
func (r *runner) awaitOutcome(k *kernel.Kernel, kind pipeline.Kind, in *interrupts) {
	if k.Running() == 0 {
		return // the call never started, or has returned: its outcome is stored
	}
	_, lease := r.op.Idempotency()
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

// kernelUnlessSignalled builds the kernel, unless the first signal comes
// first: a config that is slow to read or a store that is slow to answer
// must not keep the process from ending. The command then ends at once
// with exit code 8 and nothing run; a kernel built later is closed.
func (r *runner) kernelUnlessSignalled(newKernel kernelFunc, in *interrupts) (*kernel.Kernel, error) {
	type built struct {
		k        *kernel.Kernel
		err      error
		panicked any // what newKernel panicked with; nil: it returned
	}
	ch := make(chan built, 1)
	go func() {
		defer func() {
			if v := recover(); v != nil {
				ch <- built{panicked: v}
			}
		}()
		k, err := kernelOf(newKernel)
		ch <- built{k: k, err: err}
	}()
	select {
	case b := <-ch:
		if b.panicked != nil {
			panic(b.panicked) // on the caller's goroutine, as a direct call would
		}
		return b.k, b.err
	case <-in.ctx.Done():
	}
	go func() {
		if b := <-ch; b.k != nil {
			b.k.Close()
		}
	}()
	cause := context.Cause(in.ctx)
	fmt.Fprintf(r.stderr, "%s: stopped while starting (%s); nothing ran\n", r.cmd.CommandPath(), pipeline.ErrorText(cause))
	return nil, &ExitError{Code: exitCanceled, Err: cause}
}

// kernelOf calls newKernel, turning a nil kernel, and a typed nil
// returned as its error (which cobra could not inspect safely), into an
// error of our own.
func kernelOf(newKernel kernelFunc) (*kernel.Kernel, error) {
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
