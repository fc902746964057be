package shopcmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/labstack/echo/v4"
	"github.com/spf13/cobra"

	"github.com/sundial-go/sundial/adapters/cliadapter"
	"github.com/sundial-go/sundial/adapters/httpadapter"
	"github.com/sundial-go/sundial/adapters/mcpadapter"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/kernel/logs"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/samples/shop/internal/asynclog"
)

// Server defaults of `shop serve`. The read-header and idle timeouts keep
// slow or idle clients (slowloris) from holding connections; there is no
// ReadTimeout or WriteTimeout because the invocation's deadline bounds
// each call, and a ReadTimeout firing while a handler runs would cancel its
// context as if the client had gone.
const (
	DefaultReadHeaderTimeout = 5 * time.Second
	DefaultIdleTimeout       = 2 * time.Minute
	defaultMaxHeaderBytes    = 64 << 10
	defaultGrace             = 10 * time.Second
	// defaultLameDuck is how long `shop serve` keeps serving after the
	// signal while failing readiness, before it stops accepting.
	defaultLameDuck = time.Second
)

// ServeOptions are the settings of one `shop serve` run.
type ServeOptions struct {
	// ConfigFile is --config ("": the embedded config alone); HTTPAddr
	// and GRPCAddr are the listen addresses.
	ConfigFile string
	HTTPAddr   string
	GRPCAddr   string
	// Grace bounds the graceful shutdown: in-flight calls get this long
	// to finish once a signal arrives.
	Grace time.Duration
	// LameDuck is how long the shop keeps serving once the signal arrived
	// while it fails readiness (/healthz 503, gRPC health NOT_SERVING) and
	// closes every HTTP connection after its next response, so that load
	// balancers and keep-alive clients go elsewhere before it stops
	// accepting. Zero (tests): no lame-duck period.
	LameDuck time.Duration
	// ReadHeaderTimeout and IdleTimeout override the server defaults
	// (zero: the default).
	ReadHeaderTimeout time.Duration
	IdleTimeout       time.Duration
	// Logger receives the access log and the framework's events (JSON).
	Logger *slog.Logger
	// AsyncLog, if set, is the asynclog handler behind Logger: the
	// records it dropped are counted on /metrics (sundial_log_dropped_total).
	AsyncLog *asynclog.Handler
	// Stdout receives the "serving" lines.
	Stdout io.Writer
	// KernelOptions are added to the shop's kernel options (tests add
	// probes).
	KernelOptions []kernel.Option
	// Ready, if set, is called with the HTTP listener's address once the
	// shop accepts connections.
	Ready func(httpAddr string)
	// ConnectOrigins are the browser origins allowed to call the
	// operations over Connect and gRPC-Web from another origin (CORS);
	// none: no CORS.
	ConnectOrigins []string
}

// newServeCommand returns `shop serve`: the shop over HTTP (and gRPC)
// until SIGINT or SIGTERM, then a graceful shutdown of at most --grace.
func newServeCommand(configFile *string) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the shop over HTTP and gRPC until SIGINT or SIGTERM.",
		Long: `Serve the shop's operations over HTTP (--http) and gRPC (--grpc).

Each request leaves one JSON access log line on stderr. On SIGINT or
SIGTERM the shop first fails readiness for --lame-duck (GET /healthz
answers 503, gRPC health NOT_SERVING, every HTTP response closes its
connection) while still serving; then it stops accepting connections,
gives in-flight calls up to --grace to finish, closes what is left and
exits. A request is either answered or never read.

SIGHUP, and any change of the --config file, reloads the configuration:
new limits apply at once, in place, keeping what the limiters know; an
invalid document is refused and logged, and the limits in force stay.`,
		Args: cobra.NoArgs,
	}
	o := ServeOptions{HTTPAddr: ":5000", GRPCAddr: ":5001"}
	cmd.Flags().Var(cliadapter.NamedString(&o.HTTPAddr, "address"), "http", "HTTP listen address")
	cmd.Flags().Var(cliadapter.NamedString(&o.GRPCAddr, "address"), "grpc", "gRPC listen address")
	cmd.Flags().DurationVar(&o.Grace, "grace", defaultGrace, "how long in-flight calls may take to finish on shutdown")
	cmd.Flags().DurationVar(&o.LameDuck, "lame-duck", defaultLameDuck, "how long to keep serving after the signal while failing readiness, before draining (0: none)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		o.ConfigFile = *configFile
		o.Stdout = cmd.OutOrStdout()
		// Logs go through a bounded queue to one writer goroutine: a
		// blocked stderr drops (and counts) records instead of stalling
		// responses, the 504 at a deadline included. Records go out
		// together, at most one write every logFlushWait: under a flood,
		// not one system call each on the CPU that answers calls.
		batch := asynclog.NewBatch(cmd.ErrOrStderr(), logBatch)
		alog := asynclog.New(slog.NewJSONHandler(batch, nil), asynclog.WithFlush(batch.Flush, logFlushWait))
		o.Logger, o.AsyncLog = slog.New(alog), alog
		err := Serve(ctx, o)
		flushCtx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = alog.Close(flushCtx) // a stderr still blocked after a second loses the rest
		cancel()
		var se *serveError
		if errors.As(err, &se) {
			// A failure at run time, not a usage error: report it here and
			// exit 1 without cobra's pointer to --help.
			fmt.Fprintf(cmd.ErrOrStderr(), "shop: serve: %v\n", se.err)
			return &cliadapter.ExitError{Code: cliadapter.ExitCodeFor(pipeline.KindUnexpected), Err: se.err}
		}
		return err
	}
	return cmd
}

// serveError is a failure of serve once its configuration was accepted:
// a listener that cannot open, a shutdown that ran out of grace.
type serveError struct{ err error }

func (e *serveError) Error() string { return e.err.Error() }
func (e *serveError) Unwrap() error { return e.err }

// Serve runs the shop until ctx ends, then shuts down gracefully within
// o.Grace. It returns nil after a clean shutdown, the kernel's error for a
// configuration it rejects, and a *serveError for anything else.
func Serve(ctx context.Context, o ServeOptions) error {
	o.setDefaults()
	// OpenTelemetry's errors (a failed export) join the log, until the
	// providers have shut down.
	defer logs.OTelErrors(o.Logger)()
	tel, err := startServeTelemetry(ctx, o)
	if err != nil {
		return err
	}
	defer tel.shutdown(o.Logger)
	k, err := startKernel(ctx, o, tel)
	if errors.Is(err, errStoppedStarting) {
		// A signal before serving began: nothing to drain, a clean stop.
		o.Logger.Info("shop: stopped while starting; not serving", "cause", err.Error())
		return nil
	}
	if err != nil {
		return err
	}
	defer k.Close() // after the servers drained: the cluster store and Redis client
	// Live reconfiguration: SIGHUP and changes of --config (reload.go).
	stopReloading := startReloading(ctx, k, o.ConfigFile, o.Logger)
	defer stopReloading()
	// draining is set when the signal arrives: readiness fails from then
	// on.
	var draining atomic.Bool
	e, mcpServer, err := shopRoutes(k, tel, &draining, o)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", o.HTTPAddr)
	if err != nil {
		return &serveError{fmt.Errorf("http: %w", err)}
	}
	srv := NewHTTPServer(closeWhenDraining(e, &draining), o)
	// Call point of the gRPC adapter (grpc.go): it starts serving on
	// --grpc; the shutdown below drives its steps.
	g, err := startGRPC(k, o.GRPCAddr, o.Logger, o.Stdout)
	if err != nil {
		ln.Close()
		return &serveError{fmt.Errorf("grpc: %w", err)}
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Fprintf(o.Stdout, "shop: serving HTTP on http://%s\n", ln.Addr())
	if o.Ready != nil {
		o.Ready(ln.Addr().String())
	}
	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-served:
		served <- serveErr // for the shutdown below
	}
	sd := shutdown{o: o, k: k, srv: srv, g: g, mcp: mcpServer, served: served, draining: &draining}
	return sd.run(ctx, serveErr)
}

// errStoppedStarting is the error of a start-up that ctx ended before
// the kernel was built.
var errStoppedStarting = errors.New("shop: stopped while starting")

// startKernel builds the shop's kernel on another goroutine, so that a
// signal while it is built (a config slow to read, a Redis slow to
// answer) stops serve at once. It then returns errStoppedStarting with
// ctx's cause; a kernel built later is closed. A panic while building is
// raised again on the caller's goroutine, as a direct call would.
func startKernel(ctx context.Context, o ServeOptions, tel *shopTelemetry) (*kernel.Kernel, error) {
	opts := append([]kernel.Option{kernel.WithLogger(o.Logger), kernel.WithWorkers(ServeWorkerIdle)}, tel.kernelOptions()...)
	opts = append(opts, o.KernelOptions...)
	type built struct {
		k        *kernel.Kernel
		err      error
		panicked any // what NewKernel panicked with; nil: it returned
	}
	ch := make(chan built, 1)
	go func() {
		defer func() {
			if v := recover(); v != nil {
				ch <- built{panicked: v}
			}
		}()
		k, err := NewKernel(o.ConfigFile, opts...)
		ch <- built{k: k, err: err}
	}()
	select {
	case b := <-ch:
		if b.panicked != nil {
			panic(b.panicked)
		}
		return b.k, b.err
	case <-ctx.Done():
	}
	go func() {
		if b := <-ch; b.k != nil {
			b.k.Close()
		}
	}()
	return nil, fmt.Errorf("%w: %w", errStoppedStarting, context.Cause(ctx))
}

// setDefaults fills the options serve needs and the caller left unset.
func (o *ServeOptions) setDefaults() {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Stdout == nil {
		o.Stdout = io.Discard
	}
	if o.Grace <= 0 {
		o.Grace = defaultGrace
	}
}

// startServeTelemetry starts the shop's telemetry, with the asynchronous
// log's dropped records on /metrics (visible while the log is not).
func startServeTelemetry(ctx context.Context, o ServeOptions) (*shopTelemetry, error) {
	tel, err := startTelemetry(ctx, os.Getenv)
	if err != nil {
		return nil, &serveError{fmt.Errorf("telemetry: %w", err)}
	}
	if o.AsyncLog != nil {
		if _, err := o.AsyncLog.ObserveDropped(tel.mp.Meter(meterName)); err != nil {
			tel.shutdown(o.Logger)
			return nil, &serveError{fmt.Errorf("telemetry: %w", err)}
		}
	}
	return tel, nil
}

// shopRoutes mounts the operations, their MCP tools (/mcp) and the
// shop's own endpoints: health (failing once draining), metrics, the
// OpenAPI document and the status page.
func shopRoutes(k *kernel.Kernel, tel *shopTelemetry, draining *atomic.Bool, o ServeOptions) (*echo.Echo, *mcpadapter.Server, error) {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	a, err := httpadapter.Mount(e, k, httpadapter.WithLogger(o.Logger))
	if err != nil {
		return nil, nil, err
	}
	// Every operation as an MCP tool, over Streamable HTTP (docs/mcp.md).
	m, err := mcpadapter.New(k, &mcpadapter.Options{Name: "shop", Version: serviceVersion()})
	if err != nil {
		return nil, nil, err
	}
	e.Any("/mcp", echo.WrapHandler(m))
	// The same operations over Connect, gRPC and gRPC-Web, on this port
	// (docs/connect.md).
	if err := mountConnect(e, k, o); err != nil {
		return nil, nil, err
	}
	e.GET("/healthz", a.Wrap(func(c echo.Context) error {
		if draining.Load() {
			return c.JSON(http.StatusServiceUnavailable, map[string]string{"status": "shutting down"})
		}
		return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
	}))
	e.GET("/metrics", echo.WrapHandler(tel.metrics)) // Prometheus (telemetry.go)
	// The OpenAPI 3.1 document of the operations (docs/http.md).
	openapi, err := a.OpenAPIHandler(httpadapter.OpenAPIInfo{Title: "shop", Version: serviceVersion(),
		Description: "The Sundial shop sample: orders, reports and billing.",
		License:     &openapi3.License{Name: "MIT", Identifier: "MIT"},
		// The host that serves the document, whatever its address.
		Servers: openapi3.Servers{{URL: "/", Description: "this shop"}}})
	if err != nil {
		return nil, nil, err
	}
	e.GET("/openapi.json", openapi)
	// The live status page (opt-in in Sundial, on in the shop; `make run`
	// binds the shop to loopback, and a deployment would mount it only
	// where operators reach it).
	e.GET(statusPagePath, httpadapter.StatusPage(k, 0))
	return e, m, nil
}

// shutdown is what the graceful shutdown of a serving shop drives.
type shutdown struct {
	o        ServeOptions
	k        *kernel.Kernel
	srv      *http.Server
	g        *grpcServer
	mcp      *mcpadapter.Server
	served   chan error
	draining *atomic.Bool
}

// run shuts the shop down: lame duck, drain, then wait for stragglers.
func (sd *shutdown) run(ctx context.Context, serveErr error) error {
	o := sd.o
	o.Logger.Info("shop: shutting down", "grace", o.Grace.String(), "lameDuck", o.LameDuck.String())
	// Lame duck: fail readiness and keep serving, each HTTP response
	// closing its connection, so that balancers and pooled clients move
	// away while every request sent still gets its answer.
	sd.draining.Store(true)
	sd.k.DrainStreams() // every open stream ends now, telling its caller to reconnect elsewhere
	sd.g.notServing()
	if o.LameDuck > 0 && serveErr == nil {
		time.Sleep(o.LameDuck)
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.Grace)
	defer cancel()
	errs := sd.drain(sctx)
	if err := sd.waitStragglers(sctx); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return &serveError{errors.Join(errs...)}
	}
	return nil
}

// drain stops accepting; in-flight calls (requests read) run on within
// the grace period. Shutdown closes only idle connections (never one
// whose request was read), gRPC sends GOAWAY.
func (sd *shutdown) drain(sctx context.Context) []error {
	sd.g.drain()
	var errs []error
	// MCP first: its calls finish, then its sessions close; an open event
	// stream would hold the HTTP server's Shutdown.
	if err := sd.mcp.Shutdown(sctx); err != nil {
		errs = append(errs, fmt.Errorf("mcp: %w", err))
	}
	if err := sd.srv.Shutdown(sctx); err != nil {
		// Grace exhausted: cut the remaining connections; their calls
		// see their context canceled.
		sd.srv.Close()
		errs = append(errs, fmt.Errorf("http shutdown: %w", err))
	}
	if err := <-sd.served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		errs = append(errs, fmt.Errorf("http: %w", err))
	}
	if err := sd.g.stop(sctx); err != nil {
		errs = append(errs, fmt.Errorf("grpc shutdown: %w", err))
	}
	return errs
}

// waitStragglers gives handlers that ignored their context and outlived
// their answer (the kernel answered at their deadline) what is left of
// the grace period to return. With nothing running, Wait only dismisses
// idle workers: it gets a context of its own then, since one already
// expired (an HTTP shutdown that used the grace) would race that
// dismissal and report idle workers as an error.
func (sd *shutdown) waitStragglers(sctx context.Context) error {
	wctx := sctx
	if sctx.Err() != nil && sd.k.Running() == 0 {
		var wcancel context.CancelFunc
		wctx, wcancel = context.WithTimeout(context.Background(), time.Second)
		defer wcancel()
	}
	return sd.k.Wait(wctx)
}

// closeWhenDraining answers through h and, once draining is set, asks
// for the connection to be closed after the response (Connection: close):
// a keep-alive client then sends its next request on a new connection
// instead of on one the shutdown could close as the request arrives. It
// decides when the response's header is written, so that a call that
// began before the signal and answers after it closes its connection too.
func closeWhenDraining(h http.Handler, draining *atomic.Bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(&closingWriter{ResponseWriter: w, draining: draining}, r)
	})
}

// closingWriter sets Connection: close on its response when draining is
// set by the time the header is written.
type closingWriter struct {
	http.ResponseWriter
	draining *atomic.Bool
	written  bool
}

func (w *closingWriter) header() {
	if !w.written {
		w.written = true
		if w.draining.Load() {
			w.Header().Set("Connection", "close")
		}
	}
}

func (w *closingWriter) WriteHeader(code int) {
	w.header()
	w.ResponseWriter.WriteHeader(code)
}

func (w *closingWriter) Write(b []byte) (int, error) {
	w.header()
	return w.ResponseWriter.Write(b)
}

// Unwrap gives http.ResponseController the server's writer (Flush,
// Hijack, deadlines).
func (w *closingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// NewHTTPServer returns the shop's http.Server, with timeouts that keep
// slow and idle clients from holding connections.
func NewHTTPServer(h http.Handler, o ServeOptions) *http.Server {
	protocols := new(http.Protocols) // HTTP/1.1, and HTTP/2 without TLS for gRPC
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	srv := &http.Server{
		Handler:           h,
		Protocols:         protocols,
		ReadHeaderTimeout: DefaultReadHeaderTimeout,
		IdleTimeout:       DefaultIdleTimeout,
		MaxHeaderBytes:    defaultMaxHeaderBytes,
	}
	if o.ReadHeaderTimeout > 0 {
		srv.ReadHeaderTimeout = o.ReadHeaderTimeout
	}
	if o.IdleTimeout > 0 {
		srv.IdleTimeout = o.IdleTimeout
	}
	return srv
}

// logBatch is how many bytes of log records `shop serve` writes at once;
// logFlushWait is the least time between two writes, but of a larger batch.
const (
	logBatch     = 32 << 10
	logFlushWait = 10 * time.Millisecond
)

// ServeWorkerIdle is how long a gRPC worker goroutine of the served kernel
// waits for its next call (kernel.WithWorkers); the shutdown's k.Wait
// dismisses them.
const ServeWorkerIdle = time.Second

// statusPagePath is where the shop mounts the status page.
const statusPagePath = "/debug/sundial"
