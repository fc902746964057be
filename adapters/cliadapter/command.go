package cliadapter

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
)

// kernelFunc is AddCommands' newKernel.
type kernelFunc = func() (*kernel.Kernel, error)

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
// exits the process at once (os.Exit). WithSignals() with no signals
// leaves signal handling to the host.
func WithSignals(sigs ...os.Signal) Option {
	return optionFunc(func(o *options) { o.signals = slices.Clone(sigs) })
}

// withExit replaces os.Exit, for tests: exit is called with the exit code
// of CANCELLED (ExitCodeFor(pipeline.KindCanceled), 8) when a second
// signal arrives while an operation is still running. A nil function is
// ignored.
func withExit(exit func(code int)) Option {
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

// AddCommands adds the operations of reg to root as commands. There is one
// group per first segment of the operation ID, and one command per
// operation under it. "orders.create" becomes "root orders create", and
// "inventory.v2.reserve" becomes "root inventory v2.reserve". The
// descriptors of reg give the commands' help and flags. The operations run
// by ID on the kernel newKernel returns. An ID the kernel does not serve is
// NOT_FOUND, exit 3.
//
// An operation command calls newKernel once per execution, after its flags
// are parsed, so it may read flags such as the application's --config.
// When they do not parse, it is called too, to observe the usage error,
// and its own error is ignored. An error or a nil kernel is reported like
// a usage error, exit 2.
//
// Each operation command has one flag per input field whose type pflag
// parses, and --input for the whole input as JSON. Its group has
// --timeout, --output and --priority. docs/cli.md describes them. The
// command only decodes and encodes; the kernel runs and observes the call.
// Input that does not decode and malformed flags are rejections, observed
// too. The outcome is reported by the deadline or the first signal,
// whatever the handler does.
//
// A success writes the result to stdout and returns nil. A failure writes
// Problem Details and a human line to stderr. It returns an *ExitError
// whose Code is ExitCodeFor the outcome's kind. Usage errors are returned
// as they are, for Execute to print. AddCommands adds nothing and returns
// an error when a group's name is already a command of root. The commands
// keep the flag values they parsed: execute a tree once.
func AddCommands(root *cobra.Command, reg *operations.Registry, newKernel func() (*kernel.Kernel, error), opts ...Option) error {
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
		if d.Kind() != operations.Unary { // streams are added apart
			continue
		}
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
	timeout  timeoutValue
	output   outputValue
	baggage  string
	priority string
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
	pf.StringVar(&gf.baggage, flagBaggage, "", "W3C baggage of the call, name=value members separated by commas (e.g. tenant=acme): a per-key limit takes its key from it")
	pf.StringVar(&gf.priority, "priority", "", "class of this call: critical, default or sheddable; it can only lower the operation's configured class")
	// Errors only when the flags do not exist, which they do.
	_ = g.RegisterFlagCompletionFunc("output", completeValues(
		outputJSON+"\tthe result as indented JSON (default)",
		outputText+"\tone line per field"))
	_ = g.RegisterFlagCompletionFunc("timeout", completeValues())
	_ = g.RegisterFlagCompletionFunc("priority", completeValues("critical", "default", "sheddable"))
	return g
}

func newOperationCommand(d *operations.Descriptor, name string, gf *groupFlags, newKernel kernelFunc, o *options) *cobra.Command {
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
	fields := newInputFlags(d.Input, cmd.Flags(), d)
	fields.policy = d.InputPolicy
	for _, f := range fields.fields {
		if f.values != nil {
			_ = cmd.RegisterFlagCompletionFunc(f.flag, completeValues(f.values...))
		}
	}
	var idemKey *string
	if cmd.Flags().Lookup(flagIdempotencyKey) == nil {
		idemKey = cmd.Flags().String(flagIdempotencyKey, "",
			"idempotency key of this call (1 to 255 printable ASCII characters); with records in a shared store (Redis), one is generated when absent on an operation that takes keys and printed with a TIMEOUT or CANCELLED failure, so that a rerun with it gets this call's outcome")
	}
	cmd.Long = operationHelp(d, fields)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		r := &runner{cmd: cmd, desc: d, format: gf.output.get(), baggage: gf.baggage}
		if idemKey != nil {
			r.idemKey = *idemKey
		}
		r.priority = gf.priority
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
