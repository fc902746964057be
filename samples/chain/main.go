// Command chain is Sundial's deadline-propagation sample: a Gateway, an
// Orders service, an Inventory service (all three HTTP) and a Billing
// service (gRPC), each a Sundial application. Run them as separate
// processes,
//
//	chain inventory --listen :7002
//	chain billing   --listen :7003
//	chain orders    --listen :7001 --inventory http://127.0.0.1:7002 --billing 127.0.0.1:7003
//	chain gateway   --listen :7000 --orders http://127.0.0.1:7001 --inventory http://127.0.0.1:7002 --billing 127.0.0.1:7003
//
// or all four in one process with `chain all`. The README walks through the
// seven experiments its tests run; docs/propagation.md has the figures.
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes the command line and returns the exit code. The roles run
// until ctx ends (SIGINT or SIGTERM), then stop gracefully.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := &cobra.Command{
		Use:           "chain",
		Short:         "Sundial's deadline-propagation sample: gateway, orders, inventory (HTTP) and billing (gRPC).",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	c := &chainCLI{ctx: ctx, stderr: stderr}
	c.configFile = root.PersistentFlags().String("config", "", "JSON config `file` loaded over the embedded default config")
	c.logFormat = root.PersistentFlags().String("log-format", "text", "log format on stderr: text or json")
	root.AddCommand(c.gatewayCmd(), c.ordersCmd(), c.inventoryCmd(), c.billingCmd(), c.allCmd())
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(stderr, "chain:", err)
		return 1
	}
	return 0
}

// chainCLI is the command line's shared state: the persistent flags and
// the roles' configurations, which the role commands and "all" fill.
type chainCLI struct {
	ctx                   context.Context
	stderr                io.Writer
	configFile, logFormat *string

	gw  GatewayConfig
	ord OrdersConfig
	inv InventoryConfig
	bil BillingConfig
}

// newLogger returns the logger of one role, in the --log-format.
func (c *chainCLI) newLogger(role string) (*slog.Logger, error) {
	var h slog.Handler
	switch *c.logFormat {
	case "text":
		h = slog.NewTextHandler(c.stderr, nil)
	case "json":
		h = slog.NewJSONHandler(c.stderr, nil)
	default:
		return nil, fmt.Errorf("--log-format: want text or json, got %q", *c.logFormat)
	}
	return slog.New(h).With("role", role), nil
}

// listen defines a role command's --listen flag.
func listen(cmd *cobra.Command, def string) *string {
	return cmd.Flags().String("listen", def, "listen `address`")
}

// serveOne serves one role on addr until the context ends.
func (c *chainCLI) serveOne(cmd *cobra.Command, role, addr string, start func(net.Listener, *slog.Logger) (*server, error)) error {
	logger, err := c.newLogger(role)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv, err := start(ln, logger)
	if err != nil {
		ln.Close()
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%-9s listening on %s\n", role, loopback(ln.Addr()))
	return waitAndStop(c.ctx, srv.stop)
}

func (c *chainCLI) inventoryCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "inventory", Short: "Serve Inventory (HTTP): reserve, release, stock, slow, and the drip and silent endpoints.", Args: cobra.NoArgs}
	addr := listen(cmd, ":7002")
	inventoryFlags(cmd.Flags(), &c.inv)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		return c.serveOne(cmd, "inventory", *addr, func(ln net.Listener, l *slog.Logger) (*server, error) {
			_, srv, err := startInventory(ln, c.inv, *c.configFile, l)
			return srv, err
		})
	}
	return cmd
}

func (c *chainCLI) billingCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "billing", Short: "Serve Billing (gRPC): charge and slow.", Args: cobra.NoArgs}
	addr := listen(cmd, ":7003")
	billingFlags(cmd.Flags(), &c.bil)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		return c.serveOne(cmd, "billing", *addr, func(ln net.Listener, l *slog.Logger) (*server, error) {
			_, srv, err := startBilling(ln, c.bil, *c.configFile, l)
			return srv, err
		})
	}
	return cmd
}

func (c *chainCLI) ordersCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "orders", Short: "Serve Orders (HTTP): submit, report, stock.", Args: cobra.NoArgs}
	addr := listen(cmd, ":7001")
	cmd.Flags().StringVar(&c.ord.Inventory, "inventory", "http://127.0.0.1:7002", "Inventory's base `URL`")
	billing := cmd.Flags().String("billing", "127.0.0.1:7003", "Billing's gRPC `address`")
	ordersFlags(cmd.Flags(), &c.ord)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		return c.serveOne(cmd, "orders", *addr, func(ln net.Listener, l *slog.Logger) (*server, error) {
			_, srv, err := startOrders(ln, c.ord, *billing, *c.configFile, l)
			return srv, err
		})
	}
	return cmd
}

func (c *chainCLI) gatewayCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "gateway", Short: "Serve the Gateway (HTTP): checkout, order, fanout.", Args: cobra.NoArgs}
	addr := listen(cmd, ":7000")
	cmd.Flags().StringVar(&c.gw.Orders, "orders", "http://127.0.0.1:7001", "Orders' base `URL`")
	cmd.Flags().StringVar(&c.gw.Inventory, "inventory", "http://127.0.0.1:7002", "Inventory's base `URL`")
	cmd.Flags().StringVar(&c.gw.Billing, "billing", "127.0.0.1:7003", "Billing's gRPC `address`")
	gatewayFlags(cmd.Flags(), &c.gw)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		return c.serveOne(cmd, "gateway", *addr, func(ln net.Listener, l *slog.Logger) (*server, error) {
			_, srv, err := startGateway(ln, c.gw, *c.configFile, l)
			return srv, err
		})
	}
	return cmd
}

// chainRoles are the four roles, in the order "all" gives them ports.
var chainRoles = []string{"gateway", "orders", "inventory", "billing"}

func (c *chainCLI) allCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "all", Short: "Run the four roles in one process, on consecutive ports from --base-port.", Args: cobra.NoArgs}
	basePort := cmd.Flags().Int("base-port", 7000, "gateway's port; orders, inventory and billing take the next three (0: any free ports)")
	host := cmd.Flags().String("host", "127.0.0.1", "listen `host`")
	inventoryFlags(cmd.Flags(), &c.inv)
	billingFlags(cmd.Flags(), &c.bil)
	ordersFlags(cmd.Flags(), &c.ord)
	gatewayFlags(cmd.Flags(), &c.gw)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if *basePort < 0 || *basePort > 65532 {
			return fmt.Errorf("--base-port: want 0 to 65532, got %d", *basePort)
		}
		return c.runAll(cmd, *host, *basePort)
	}
	return cmd
}

// runAll starts the four roles on consecutive ports from basePort (0: any
// free ports) and serves them until the context ends.
func (c *chainCLI) runAll(cmd *cobra.Command, host string, basePort int) error {
	cc := ClusterConfig{Gateway: c.gw, Orders: c.ord, Inventory: c.inv, Billing: c.bil, ConfigFile: *c.configFile, Listen: map[string]string{}}
	for i, r := range chainRoles {
		port := 0
		if basePort != 0 {
			port = basePort + i
		}
		cc.Listen[r] = net.JoinHostPort(host, strconv.Itoa(port))
	}
	var lerr error
	cc.Logger = func(role string) *slog.Logger {
		l, err := c.newLogger(role)
		lerr = err
		return l
	}
	cl, err := StartCluster(cc)
	if err != nil {
		return err
	}
	if lerr != nil {
		cl.Close(context.Background())
		return lerr
	}
	for _, r := range chainRoles {
		fmt.Fprintf(cmd.OutOrStdout(), "%-9s listening on %s\n", r, cl.Addrs[r])
	}
	return waitAndStop(c.ctx, cl.Close)
}

// waitAndStop blocks until ctx ends, then stops within shutdownGrace.
func waitAndStop(ctx context.Context, stop func(context.Context) error) error {
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	return stop(sctx)
}

func inventoryFlags(fs *pflag.FlagSet, c *InventoryConfig) {
	fs.DurationVar(&c.ReserveWork, "reserve-work", 1500*time.Millisecond, "how long Inventory takes to reserve")
	fs.IntVar(&c.StockFailures, "stock-failures", 0, "how many stock reads answer 503 first")
}

func billingFlags(fs *pflag.FlagSet, c *BillingConfig) {
	fs.DurationVar(&c.ChargeWork, "charge-work", 1500*time.Millisecond, "how long Billing takes to charge")
	fs.BoolVar(&c.SwallowCancel, "swallow-cancel", false, "make billing.slow ignore cancellation (the failure mode of experiment 7)")
	fs.BoolVar(&c.Committed, "committed-charges", false, "charges complete once started, even after the deadline (experiment 8)")
}

func ordersFlags(fs *pflag.FlagSet, c *OrdersConfig) {
	fs.DurationVar(&c.ReadTimeout, "read-timeout", 5*time.Second, "Orders' per-read timeout towards Inventory")
	fs.StringVar(&c.StockPath, "stock-path", "/stock", "the Inventory path stock reads go to (/silent for experiment 2)")
	fs.IntVar(&c.Attempts, "attempts", 3, "attempts per stock read")
	fs.DurationVar(&c.AttemptTimeout, "attempt-timeout", time.Second, "cap on each stock read attempt")
	fs.DurationVar(&c.Backoff, "backoff", 10*time.Millisecond, "pause between stock read attempts")
	fs.DurationVar(&c.LocalWork, "local-work", 500*time.Millisecond, "local work between two stock reads")
}

func gatewayFlags(fs *pflag.FlagSet, c *GatewayConfig) {
	fs.DurationVar(&c.MinRemaining, "min-remaining", 30*time.Millisecond, "least time a request must bring to the gateway")
	fs.DurationVar(&c.Reserve, "reserve", 10*time.Millisecond, "time the gateway keeps for itself")
	fs.DurationVar(&c.MinDownstream, "min-downstream", 20*time.Millisecond, "smallest timeout worth a downstream call")
	fs.IntVar(&c.CheckoutAttempts, "checkout-attempts", 1, "attempts of a checkout; retries carry one idempotency key (experiment 8)")
	fs.DurationVar(&c.CheckoutAttemptTimeout, "checkout-attempt-timeout", 0, "cap on each checkout attempt (0: the whole budget)")
	fs.DurationVar(&c.CheckoutBackoff, "checkout-backoff", 50*time.Millisecond, "pause after a checkout attempt that timed out")
	fs.BoolVar(&c.RetryWithoutKey, "retry-without-key", false, "retry checkouts without an idempotency key (the anti-pattern of experiment 8)")
}
