package kernel

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/knadh/koanf/v2"

	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience"
)

// Option configures a Kernel. Options are applied in order by New.
type Option interface{ apply(*options) }

type optionFunc func(*options)

func (f optionFunc) apply(o *options) { f(o) }

type stagedMiddleware struct {
	stage pipeline.Stage
	mw    pipeline.Middleware
}

// BuiltIn creates the built-in middleware of one stage for one operation
// (op is nil for the host pipeline). It returns nil to add nothing.
type BuiltIn func(k *Kernel, op *operations.Descriptor) pipeline.Middleware

type options struct {
	registry   *operations.Registry
	configJSON [][]byte
	configFile string
	envPrefix  string
	environ    func() []string
	logger     *slog.Logger
	app        []stagedMiddleware
	builtins   [][2]any // {pipeline.Stage, BuiltIn}
	errs       []error
	telemetry  telemetryOptions // telemetry_options.go
}

// WithRegistry sets the operations the kernel serves. Without it the
// kernel has no operations (host endpoints still run through the
// pipeline).
func WithRegistry(r *operations.Registry) Option {
	return optionFunc(func(o *options) { o.registry = r })
}

// WithConfigJSON adds a JSON configuration document, e.g. an embedded
// default config. Documents load in the order given; later ones override
// earlier ones key by key, and a config file (WithConfigFile) and the
// environment (WithEnv) override them all.
func WithConfigJSON(doc []byte) Option {
	return optionFunc(func(o *options) { o.configJSON = append(o.configJSON, doc) })
}

// WithConfigFile loads a JSON config file over the JSON documents. An empty
// path is a no-op; a missing or malformed file fails New.
func WithConfigFile(path string) Option {
	return optionFunc(func(o *options) { o.configFile = path })
}

// WithEnv enables environment overrides: variables starting with prefix
// (e.g. "SUNDIAL_") override config keys. After the prefix, "__" separates
// key segments, matched case-insensitively; the segment after Operations is
// an operation ID with "_" standing for ".":
//
//	SUNDIAL_KERNEL__MAXTIMEOUTSECONDS=10
//	SUNDIAL_KERNEL__RESILIENCE__OPERATIONS__ORDERS_CREATE__PERMITLIMIT=5
//
// Values are read as JSON scalars (numbers, booleans), else as strings.
// Off by default.
func WithEnv(prefix string) Option {
	return optionFunc(func(o *options) { o.envPrefix = prefix })
}

// WithEnviron replaces os.Environ as the source of WithEnv's variables (for
// tests).
func WithEnviron(environ func() []string) Option {
	return optionFunc(func(o *options) { o.environ = environ })
}

// WithLogger sets the logger for panics and framework events. The default
// discards everything: the kernel prints nothing it was not asked to.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(o *options) {
		if l != nil {
			o.logger = l
		}
	})
}

// UseAt registers application middleware at a stage. It runs after the
// stage's built-in middleware and after middleware registered earlier at
// the same stage. An invalid stage or a nil middleware fails New.
func UseAt(stage pipeline.Stage, mw pipeline.Middleware) Option {
	return optionFunc(func(o *options) {
		switch {
		case !stage.Valid():
			o.errs = append(o.errs, fmt.Errorf("kernel: UseAt: invalid stage %d", stage))
		case mw == nil:
			o.errs = append(o.errs, fmt.Errorf("kernel: UseAt(%s): nil middleware", stage))
		default:
			o.app = append(o.app, stagedMiddleware{stage, mw})
		}
	})
}

// WithBuiltIn adds a built-in middleware factory at a stage, ahead of all
// application middleware of that stage. In the Resilience stage it comes
// after the kernel's DeadlineMiddleware and limits, which are first there. It is how framework packages (such
// as telemetry) plug their stage middleware in; applications use UseAt.
func WithBuiltIn(stage pipeline.Stage, b BuiltIn) Option {
	return optionFunc(func(o *options) {
		if !stage.Valid() || b == nil {
			o.errs = append(o.errs, fmt.Errorf("kernel: WithBuiltIn: invalid stage %d or nil factory", stage))
			return
		}
		o.builtins = append(o.builtins, [2]any{stage, b})
	})
}

// Kernel runs invocations through the compiled pipeline. It is safe for
// concurrent use.
type Kernel struct {
	registry   *operations.Registry
	conf       *koanf.Koanf
	logger     *slog.Logger
	settings   Settings
	resilience resilience.Options
	ops        map[string]*compiled
	host       pipeline.Handler
	limits     map[string]*resilience.OperationLimits // operations with a breaker or limits
}

type compiled struct {
	desc    *operations.Descriptor
	policy  resilience.Policy
	handler pipeline.Handler
}

// New builds a kernel. It loads and validates the configuration (every
// error names the full key path), then compiles one chain per registered
// operation and one for host endpoints.
func New(opts ...Option) (*Kernel, error) {
	o := &options{}
	for _, opt := range opts {
		if opt != nil {
			opt.apply(o)
		}
	}
	if err := errors.Join(o.errs...); err != nil {
		return nil, err
	}
	if o.registry == nil {
		o.registry = operations.NewRegistry()
	}
	if o.logger == nil {
		o.logger = slog.New(slog.DiscardHandler)
	}
	if o.environ == nil {
		o.environ = os.Environ
	}
	conf, err := loadConfig(o)
	if err != nil {
		return nil, err
	}
	settings, resRaw, err := parseSettings(conf.Get("Sundial" + Delimiter + "Kernel"))
	if err != nil {
		return nil, err
	}
	k := &Kernel{
		registry: o.registry,
		conf:     conf,
		logger:   o.logger,
		settings: settings,
		ops:      make(map[string]*compiled),
	}
	if settings.UseBuiltInMiddleware {
		if k.resilience, err = resilience.ParseOptions(resRaw, "Sundial.Kernel.Resilience"); err != nil {
			return nil, err
		}
	}
	registerTelemetry(o, k)
	// An override for an operation this kernel does not serve is allowed
	// (one config file may serve several services) but is most likely a
	// typo that leaves a limit unapplied: say so.
	for _, id := range k.resilience.OperationIDs() {
		if _, ok := o.registry.Lookup(id); !ok {
			k.logger.Warn("kernel: Sundial.Kernel.Resilience.Operations."+id+": no operation with this ID is registered; its policy applies to nothing",
				"operation", id)
		}
	}
	for _, d := range o.registry.All() {
		c := &compiled{desc: d, policy: k.PolicyFor(d.ID)}
		c.handler = k.compile(o, d, c.policy, replaceable(d.Handler()))
		k.ops[d.ID] = c
	}
	k.host = k.compile(o, nil, resilience.Policy{}, hostTerminal)
	observeLimits(o, k)
	return k, nil
}

// compile builds the chain of one operation (d nil: the host pipeline).
func (k *Kernel) compile(o *options, d *operations.Descriptor, p resilience.Policy, terminal pipeline.Handler) pipeline.Handler {
	var mws []pipeline.Middleware
	for _, stage := range pipeline.Stages() {
		if stage == pipeline.StageResilience && k.settings.UseBuiltInMiddleware {
			// The deadline, then the operation's limits inside it, as one
			// middleware: a rejection costs no deadline context. It is first
			// in its stage, so other built-ins there run under the deadline.
			var limits *resilience.OperationLimits
			if d != nil {
				limits = k.newLimits(d.ID, p)
			}
			mws = append(mws, resilience.Stage(resilience.NewDeadlineMiddleware(p.Timeout, k.settings.MaxTimeout), limits))
		}
		for _, b := range o.builtins {
			if b[0].(pipeline.Stage) == stage {
				if mw := b[1].(BuiltIn)(k, d); mw != nil {
					mws = append(mws, mw)
				}
			}
		}
		switch stage {
		case pipeline.StageValidation:
			if d != nil && d.Input != nil && implementsValidator(d) {
				mws = append(mws, validationMiddleware{})
			}
		}
		for _, a := range o.app {
			if a.stage == stage {
				mws = append(mws, a.mw)
			}
		}
	}
	onPanic := func(inv *pipeline.Invocation, p *pipeline.PanicError) {
		k.logger.Error("sundial: panic recovered", "operation", inv.Name(), "panic", fmt.Sprint(p.Value), "stack", string(p.Stack))
	}
	return pipeline.Recover(pipeline.Chain(pipeline.Recover(terminal, onPanic), mws...), onPanic)
}

// hostTerminal runs the function given to InvokeFunc.
func hostTerminal(inv *pipeline.Invocation) error {
	h := inv.Terminal()
	if h == nil {
		return pipeline.Errorf(pipeline.KindUnexpected, pipeline.CodeUnexpected, "kernel: host invocation without a handler")
	}
	return h(inv)
}

// replaceable returns the terminal of an operation's chain: the registered
// handler h, or the handler InvokeWith set on this very invocation (an
// in-process call made from inside it is another invocation and runs its
// own registered handler).
func replaceable(h pipeline.Handler) pipeline.Handler {
	return func(inv *pipeline.Invocation) error {
		if t := inv.Terminal(); t != nil {
			return t(inv)
		}
		return h(inv)
	}
}

// InvokeWith runs inv through the compiled chain of its operation — the
// same deadline, breaker, limits and middleware as Invoke — with fn as the
// terminal handler in place of the operation's registered one. Adapters
// use it to run an application's own handlers (such as generated gRPC
// services) under an operation's pipeline. A nil fn is Invoke; an
// operation the kernel does not know is a NOT_FOUND outcome.
func (k *Kernel) InvokeWith(inv *pipeline.Invocation, fn pipeline.Handler) error {
	if fn == nil {
		return k.Invoke(inv)
	}
	prev := inv.Terminal()
	inv.SetTerminal(fn)
	err := k.Invoke(inv)
	inv.SetTerminal(prev)
	return err
}

// Invoke runs inv through the pipeline of its operation and returns the
// attributed outcome (also stored with inv.SetOutcome); on success the
// result is inv.Output(). An invocation without an operation is run
// through the host pipeline with InvokeFunc instead; an operation the
// kernel does not know is a NOT_FOUND outcome.
func (k *Kernel) Invoke(inv *pipeline.Invocation) error {
	id := inv.OperationID()
	c, ok := k.ops[id]
	if !ok {
		err := notRegistered(id)
		inv.SetOutcome(err)
		return err
	}
	err := c.handler(inv)
	inv.SetOutcome(err)
	return err
}

// InvokeFunc runs a host endpoint (an invocation without an operation)
// through the host pipeline: the Diagnostics and Deadline middleware and
// application middleware apply; the per-operation limits do not. fn is the
// endpoint's handler.
func (k *Kernel) InvokeFunc(inv *pipeline.Invocation, fn pipeline.Handler) error {
	prev := inv.Terminal()
	inv.SetTerminal(fn)
	err := k.host(inv)
	inv.SetTerminal(prev)
	inv.SetOutcome(err)
	return err
}

// Call invokes the operation id in-process with a typed input and output.
// The context is the parent: its cancellation and deadline apply.
func Call[In, Out any](ctx context.Context, k *Kernel, id string, in In) (Out, error) {
	var zero Out
	// k.ops is fixed at New: reading it takes no lock, unlike the registry.
	c, ok := k.ops[id]
	if !ok {
		return zero, notRegistered(id)
	}
	inv := pipeline.NewInvocation(ctx, c.desc, &in)
	err := c.handler(inv)
	inv.SetOutcome(err)
	if err != nil {
		return zero, err
	}
	out, ok := inv.Output().(Out)
	if !ok && inv.Output() != nil {
		return zero, pipeline.Errorf(pipeline.KindUnexpected, pipeline.CodeUnexpected, "kernel: operation %q returned %T", id, inv.Output())
	}
	return out, nil
}

// Registry returns the kernel's operations.
func (k *Kernel) Registry() *operations.Registry { return k.registry }

// Lookup returns the descriptor of a registered operation.
func (k *Kernel) Lookup(id string) (*operations.Descriptor, bool) {
	c, ok := k.ops[id]
	if !ok {
		return nil, false
	}
	return c.desc, true
}

// Config returns the loaded configuration, for adapters and applications
// that read sections of their own. Key paths use [Delimiter].
func (k *Kernel) Config() *koanf.Koanf { return k.conf }

// Logger returns the kernel's logger.
func (k *Kernel) Logger() *slog.Logger { return k.logger }

// Settings returns the parsed Sundial.Kernel section.
func (k *Kernel) Settings() Settings { return k.settings }

// PolicyFor returns the merged resilience policy of the operation id (the
// zero Policy when the built-in middleware is off).
func (k *Kernel) PolicyFor(id string) resilience.Policy {
	if !k.settings.UseBuiltInMiddleware {
		return resilience.Policy{}
	}
	return k.resilience.PolicyFor(id)
}

// Limits returns the breaker, rate limit and concurrency limit of the
// operation id — for observing their state (breaker state, queue depths,
// calls in flight) — or nil when the operation has none of them (nothing
// configured, built-in middleware off, or an unknown id). The methods of a
// nil *OperationLimits report an idle, closed state.
func (k *Kernel) Limits(id string) *resilience.OperationLimits { return k.limits[id] }

// newLimits creates the ResilienceMiddleware of the operation id, once,
// and keeps it for Limits. It returns nil when p configures no limit.
func (k *Kernel) newLimits(id string, p resilience.Policy) *resilience.OperationLimits {
	l := resilience.NewResilienceMiddleware(id, p)
	if l != nil {
		if k.limits == nil {
			k.limits = make(map[string]*resilience.OperationLimits)
		}
		k.limits[id] = l
	}
	return l
}

// validationMiddleware calls Validate on inputs that implement
// operations.Validator.
type validationMiddleware struct{}

func (validationMiddleware) Invoke(inv *pipeline.Invocation, next pipeline.Handler) error {
	if v, ok := inv.Input().(operations.Validator); ok && v != nil {
		if err := v.Validate(); err != nil {
			if pe, ok := errors.AsType[*pipeline.Error](err); ok {
				return pe
			}
			return pipeline.Wrap(pipeline.KindValidation, pipeline.CodeValidation, err.Error(), err)
		}
	}
	return next(inv)
}

func implementsValidator(d *operations.Descriptor) bool {
	vt := reflectTypeOfValidator
	return d.Input.Implements(vt) || reflectPtrTo(d.Input).Implements(vt)
}

// notRegistered is the NOT_FOUND outcome of a call to an unknown operation.
func notRegistered(id string) *pipeline.Error {
	return pipeline.NotFound(pipeline.CodeNotFound, fmt.Sprintf("Operation '%s' is not registered.", id)).WithDetail("id", id)
}
