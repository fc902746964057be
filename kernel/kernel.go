package kernel

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sundial-go/sundial/kernel/internal/config"
	"github.com/sundial-go/sundial/kernel/internal/observe"
	"github.com/sundial-go/sundial/kernel/logs"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience"
	"github.com/sundial-go/sundial/resilience/cluster"
	"github.com/sundial-go/sundial/resilience/deadline"
	"github.com/sundial-go/sundial/resilience/idempotency"
	"github.com/sundial-go/sundial/resilience/outbound"
)

// Option configures a Kernel. Options are applied in order by New.
type Option interface{ apply(*options) }

type optionFunc func(*options)

func (f optionFunc) apply(o *options) { f(o) }

type stagedMiddleware struct {
	stage pipeline.Stage
	mw    pipeline.Middleware
}

type options struct {
	registry   *operations.Registry
	configJSON [][]byte
	configFile string
	envPrefix  string
	environ    func() []string
	logger     *slog.Logger
	workerIdle time.Duration
	app        []stagedMiddleware
	errs       []error
	telemetry  telemetryOptions // telemetry_options.go
	redis      redis.UniversalClient
	lookupEnv  func(string) (string, bool)
	idem       idemOptions          // idempotency.go
	limitKinds map[string]limitKind // limitkinds.go
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
// path is a no-op. A missing or malformed file fails New with an
// *fs.PathError for path, Op "kernel: config file", and so does anything
// but a regular file of at most MaxConfigFileBytes. Its Err says why,
// without the path.
func WithConfigFile(path string) Option {
	return optionFunc(func(o *options) { o.configFile = path })
}

// WithEnv enables environment overrides: variables starting with prefix (eg
// "SUNDIAL_") override config keys. After the prefix, "__" separates key
// segments, matched case-insensitively. The segment after Operations is an
// operation ID, with "_" standing for ".". For example:
//
//	SUNDIAL_KERNEL__MAXTIMEOUTSECONDS=10
//	SUNDIAL_KERNEL__RESILIENCE__OPERATIONS__ORDERS_CREATE__PERMITLIMIT=5
//
// Values are read as JSON scalars (numbers, booleans), else as strings.
// Environment overrides are off by default. An empty prefix is a no-op.
func WithEnv(prefix string) Option {
	return optionFunc(func(o *options) { o.envPrefix = prefix })
}

// withEnviron replaces os.Environ as the source of WithEnv's variables
// (tests; see export_test.go).
func withEnviron(environ func() []string) Option {
	return optionFunc(func(o *options) { o.environ = environ })
}

// WithLogger sets the logger for panics, late results, configuration warnings
// and other framework events. The adapters write their request logs to it
// too, unless given their own. The default writes Warn and above to
// slog.Default, as it is when each record is written. So a misspelt operation
// ID and the cause of an UNEXPECTED outcome reach stderr. The request logs at
// Info cost nothing. A nil logger is a no-op.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(o *options) {
		if l != nil {
			o.logger = l
		}
	})
}

// WithWorkers makes Handle run chains on worker goroutines, instead of on a
// new goroutine per call. Handle is the gRPC and CLI adapters' entry point. A
// worker stays for further calls until it has been idle for idle. A new
// goroutine starts with a small stack that grows by copying; a worker keeps
// its grown stack. Use it for a server under load (docs/performance.md).
//
// A worker serves one call after another. So goroutine state a handler leaves
// changed carries over to later calls, as with grpc-go's workers. Examples
// are pprof labels, or runtime.LockOSThread without an unlock. Idle workers
// outlive the calls that started them. Kernel.Wait, which a server calls at
// shutdown, dismisses them. So must a test under testing/synctest before its
// bubble ends. The default, and 0 or a negative idle, is a goroutine per
// call.
func WithWorkers(idle time.Duration) Option {
	return optionFunc(func(o *options) { o.workerIdle = max(idle, 0) })
}

// UseAt registers application middleware at a stage. It runs after the
// stage's built-in middleware and after middleware registered earlier at
// the same stage. An invalid stage or a nil middleware fails New.
func UseAt(stage pipeline.Stage, mw pipeline.Middleware) Option {
	return optionFunc(func(o *options) {
		switch {
		case stage > pipeline.StageHandle:
			o.errs = append(o.errs, fmt.Errorf("kernel: UseAt: invalid stage %d", stage))
		case mw == nil:
			o.errs = append(o.errs, fmt.Errorf("kernel: UseAt(%s): nil middleware", stage))
		default:
			o.app = append(o.app, stagedMiddleware{stage, mw})
		}
	})
}

// Kernel runs invocations through the compiled pipeline. It is safe for
// concurrent use.
type Kernel struct {
	registry *operations.Registry
	replay   pipeline.ReplayMark // every invocation's; the idempotency middleware's alone
	logger   *slog.Logger
	settings parsedSettings // as at New; the live parts are in live
	live     atomic.Pointer[liveConfig]
	opts     *options             // what New was given, for Reload
	reloadMu sync.Mutex           // serialises reloads
	reloads  [3]atomic.Int64      // by reloadResult
	ops      map[string]*compiled // fixed at New: read without a lock
	host     *compiled
	all      []*compiled                   // the operations' and the host's, fixed at New
	handles  []*Op                         // Operations: sorted by ID, fixed at New
	limits   map[string]*resilience.Limits // operations with a breaker or limits
	custom   map[string]customLimits       // limits of your own kinds, by operation
	tel      *observe.Telemetry            // nil: telemetry off
	clock    arrivalClock                  // reads a call's arrival
	deps     atomic.Pointer[map[string]*outbound.Dependency]

	// running counts guarded invocations (Op.Serve, Op.Handle) whose chain has
	// not returned, stragglers included; Wait polls it.
	running atomic.Int64
	// stragglers counts invocations still running after their answer left
	// (see Settings.MaxStragglers).
	stragglers atomic.Int64
	// draining is set by DrainStreams (stream.go).
	draining atomic.Bool

	// baggageLog and lateLog are logger, sampled. Callers cause their records at
	// will: too much baggage, or calls to a handler that ignores its context.
	baggageLog, lateLog *slog.Logger

	// With WithWorkers, Handle's chains run on workers: jobs hands a call
	// to an idle one, workers counts the live ones (see dispatch).
	workerIdle time.Duration
	jobs       chan *guard
	workers    atomic.Int64

	// Idempotency keys (idempotency.go): the store, made at New when an
	// operation enables them.
	idemStore idempotency.Store
	idemPol   map[string]idempotency.Policy

	// Cluster-scoped limits (redis.go).
	rdb       redis.UniversalClient
	ownsRedis bool
	// store is the cluster store, made by New or by the first Reload that scopes
	// an operation to the cluster. Calls, Status and Close read it concurrently
	// with that Reload.
	store     atomic.Pointer[cluster.Store]
	closed    bool // set by Close under reloadMu: Reload refuses after it
	closeOnce sync.Once
}

// compiled is the pipeline of one operation (desc nil: host endpoints).
type compiled struct {
	desc    *operations.Descriptor
	checked bool                  // desc.Constrained(): Call checks the input's constraints
	idem    idempotency.Policy    // the operation's; fixed at New
	timeout atomic.Int64          // the operation's TimeoutSeconds in ns; 0: none
	class   atomic.Int32          // the operation's Priority
	mws     []pipeline.Middleware // the chain's middleware, for per-call terminals
	handler pipeline.Handler      // the chain around the registered handler
	obs     *observe.Op           // nil: telemetry off
	lat     *latency              // answer times for Status; nil: host pipeline
	onPanic func(*pipeline.Invocation, *pipeline.PanicError)
	// stragglers counts this chain's calls still running after their
	// answer left (part of Kernel.stragglers).
	stragglers atomic.Int64
	// stream is the configuration of a streaming operation's streams;
	// open are its open streams (stream.go).
	stream atomic.Pointer[config.Stream]
	open   openStreams
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
		o.logger = slog.New(defaultHandler{})
	}
	if o.environ == nil {
		o.environ = os.Environ
	}
	if o.lookupEnv == nil {
		o.lookupEnv = os.LookupEnv
	}
	conf, err := loadConfig(o)
	if err != nil {
		return nil, err
	}
	settings, resRaw, err := parseSettings(conf.Get("Sundial" + delimiter + "Kernel"))
	if err != nil {
		return nil, err
	}
	k := &Kernel{
		registry: o.registry,
		logger:   o.logger,
		settings: settings,
		opts:     o,
		ops:      make(map[string]*compiled),

		workerIdle: o.workerIdle,
		jobs:       make(chan *guard),

		baggageLog: logs.Sampled(o.logger, slog.LevelWarn, msgBaggageCut),
		lateLog:    logs.Sampled(o.logger, slog.LevelWarn, msgLate),
	}
	lc := &liveConfig{maxTimeout: settings.MaxTimeout, maxStragglers: settings.MaxStragglers, dependencies: settings.Dependencies}
	k.applyDependencies(lc.dependencies)
	if settings.UseBuiltInMiddleware {
		if lc.policies, err = parsePolicies(resRaw, resilienceSection); err != nil {
			return nil, err
		}
	}
	k.live.Store(lc)
	if err := k.setUpCluster(o); err != nil {
		return nil, err
	}
	k.tel = newTelemetry(o, k)
	// An override for an operation this kernel does not serve is allowed
	// (one config file may serve several services) but is most likely a
	// typo that leaves a limit unapplied: say so.
	k.warnUnregistered(lc.policies)
	if err := k.setUpIdempotency(o, lc.policies); err != nil {
		k.Close()
		return nil, err
	}
	if err := k.setUpCustom(lc.policies); err != nil {
		k.Close()
		return nil, err
	}
	for _, d := range o.registry.All() {
		c := k.compile(o, d, k.policyFor(d.ID))
		k.ops[d.ID] = c
		k.handles = append(k.handles, &Op{k: k, c: c})
	}
	k.host = k.compile(o, nil, resilience.Policy{})
	k.all = append(slices.Collect(maps.Values(k.ops)), k.host)
	observeLimits(o, k)
	return k, nil
}

// compile builds the chain of one operation (d nil: the host pipeline).
func (k *Kernel) compile(o *options, d *operations.Descriptor, p resilience.Policy) *compiled {
	c := &compiled{desc: d, checked: d.Constrained()}
	if d != nil {
		c.idem = k.idemPol[d.ID]
	}
	c.timeout.Store(int64(p.Timeout))
	c.class.Store(int32(p.Priority))
	c.onPanic = func(inv *pipeline.Invocation, p *pipeline.PanicError) {
		k.logger.Error("sundial: panic recovered", "operation", inv.Name(), "panic", fmt.Sprint(p.Value), "stack", string(p.Stack))
	}
	if d != nil {
		c.obs = k.tel.Operation(d)
		c.lat = newLatency(time.Now())
		// Every operation has a stream config, the zero one when the
		// built-in middleware is off, so status and streams never meet nil.
		st := k.streamFor(d.ID)
		c.stream.Store(&st)
	}
	for stage := pipeline.StageDiagnostics; stage <= pipeline.StageHandle; stage++ {
		if stage == pipeline.StageResilience && k.settings.UseBuiltInMiddleware {
			// The deadline, then the operation's limits inside it, as one
			// middleware: a rejection costs no deadline context. It is first
			// in its stage, so application middleware there runs under the
			// deadline.
			// Every operation gets its limits, configured or not, so that
			// a reload can give it some (Reload).
			if d != nil {
				c.mws = append(c.mws, k.newLimits(d.ID, limitsPolicy(d, p, *c.stream.Load())))
			} else {
				c.mws = append(c.mws, deadline.Middleware())
			}
		}
		if stage == pipeline.StageHandle && d != nil {
			if mw := k.idempotencyMiddleware(o, d); mw != nil {
				c.mws = append(c.mws, mw)
			}
		}
		if stage == pipeline.StageValidation && d != nil && d.Input != nil && implementsValidator(d) {
			c.mws = append(c.mws, validationMiddleware{})
		}
		for _, a := range o.app {
			if a.stage == stage {
				c.mws = append(c.mws, a.mw)
			}
		}
	}
	terminal := missingHandler
	if d != nil {
		terminal = d.Handler()
	}
	c.handler = c.chain(terminal)
	return c
}

// chain returns the operation's middleware around terminal. A panic in
// the terminal becomes its UNEXPECTED outcome, which every middleware
// sees; a panic in a middleware is recovered at the kernel's edge (run).
func (c *compiled) chain(terminal pipeline.Handler) pipeline.Handler {
	return pipeline.Chain(recoverHandler(terminal, c.onPanic), c.mws...)
}

// missingHandler is the terminal of a host invocation that came without a
// handler.
func missingHandler(context.Context, *pipeline.Invocation) (any, error) {
	return nil, pipeline.NewError(pipeline.KindUnexpected, pipeline.CodeUnexpected, "kernel: host invocation without a handler")
}

// Call invokes the operation id in-process with a typed input and output.
// The context is the parent: its cancellation and deadline apply (its
// deadline is the caller's). Call runs on the caller's goroutine and
// returns when the chain does: a handler that ignores its context delays
// it (the guarded entry points are Serve and Handle). The input's
// constraints (validate tags) are checked as the adapters check them,
// before the invocation runs: a failure is KERNEL_VALIDATION_007 and
// spends no permit.
func Call[In, Out any](ctx context.Context, k *Kernel, id string, in In) (Out, error) {
	var zero Out
	c := k.ops[id]
	u := Unary{Input: &in}
	if c != nil && c.checked {
		// Checked here, handed to the invocation as its decoding's
		// failure: a call that passes allocates nothing for it.
		if perr := c.desc.CheckConstraints(&in); perr != nil {
			u.Decode = func(time.Time) (any, error) { return nil, perr }
		}
	}
	res, err := k.call(ctx, c, &u, id)
	if err != nil {
		return zero, err
	}
	out, ok := res.(Out)
	if !ok && res != nil {
		return zero, pipeline.NewError(pipeline.KindUnexpected, pipeline.CodeUnexpected, fmt.Sprintf("kernel: operation %q returned %T", id, res))
	}
	return out, nil
}

// Logger returns the kernel's logger.
func (k *Kernel) Logger() *slog.Logger { return k.logger }

// policyFor returns the merged resilience policy of the operation id (the
// zero Policy when the built-in middleware is off).
func (k *Kernel) policyFor(id string) resilience.Policy {
	if !k.settings.UseBuiltInMiddleware {
		return resilience.Policy{}
	}
	return k.live.Load().policies.policyFor(id)
}

// limitsOf returns the breaker, rate limit and concurrency limit of the
// operation id, for observing their state. It returns nil when the operation
// has none of them. That is so when nothing is configured, the built-in
// middleware is off, or the id is unknown. The methods of a nil *Limits
// report an idle, closed state. After a reload it reports the limits then in
// force.
func (k *Kernel) limitsOf(id string) *resilience.Limits {
	if l := k.limits[id]; l != nil && l.Policy().Limited() {
		return l
	}
	return nil
}

// newLimits creates the Limits of the operation id, once,
// and keeps it for limitsOf.
func (k *Kernel) newLimits(id string, p resilience.Policy) *resilience.Limits {
	l := resilience.NewLimits(id, p, append(k.clusterOptions(id, p), k.custom[id].opts...)...)
	if k.limits == nil {
		k.limits = make(map[string]*resilience.Limits)
	}
	k.limits[id] = l
	return l
}

// validationMiddleware calls Validate on inputs that implement
// operations.Validator.
type validationMiddleware struct{}

func (validationMiddleware) Invoke(ctx context.Context, inv *pipeline.Invocation, next pipeline.Handler) (any, error) {
	if v, ok := inv.Input().(operations.Validator); ok && v != nil {
		if err := v.Validate(); err != nil {
			return nil, validationError(err)
		}
	}
	return next(ctx, inv)
}

// validationError is the outcome of an input whose Validate returned err.
func validationError(err error) *pipeline.Error {
	if pe, ok := errors.AsType[*pipeline.Error](err); ok && pe != nil {
		return pe
	}
	return pipeline.Wrap(pipeline.KindValidation, pipeline.CodeValidation, pipeline.ErrorText(err), err)
}

func implementsValidator(d *operations.Descriptor) bool {
	vt := reflectTypeOfValidator
	return d.Input.Implements(vt) || reflectPtrTo(d.Input).Implements(vt)
}

// codeNotFound is notRegistered's code.
const codeNotFound = "KERNEL_NOT_FOUND_001"

// notRegistered is the NOT_FOUND outcome of a call to an unknown operation.
func notRegistered(id string) *pipeline.Error {
	return pipeline.NewError(pipeline.KindNotFound, codeNotFound, fmt.Sprintf("Operation '%s' is not registered.", id)).WithDetail("id", id)
}

// priority returns the operation's configured class (PriorityDefault for
// the host pipeline).
func (c *compiled) priority() pipeline.Priority {
	if c == nil {
		return pipeline.PriorityDefault
	}
	return pipeline.Priority(c.class.Load())
}

// operationTimeout returns the operation's TimeoutSeconds (0: none, or
// the host pipeline).
func (c *compiled) operationTimeout() time.Duration {
	if c == nil {
		return 0
	}
	return time.Duration(c.timeout.Load())
}
