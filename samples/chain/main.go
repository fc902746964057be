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
	configFile := root.PersistentFlags().String("config", "", "JSON config `file` loaded over the embedded default config")
	logFormat := root.PersistentFlags().String("log-format", "text", "log format on stderr: text or json")
	newLogger := func(role string) (*slog.Logger, error) {
		var h slog.Handler
		switch *logFormat {
		case "text":
			h = slog.NewTextHandler(stderr, nil)
		case "json":
			h = slog.NewJSONHandler(stderr, nil)
		default:
			return nil, fmt.Errorf("--log-format: want text or json, got %q", *logFormat)
		}
		return slog.New(h).With("role", role), nil
	}

	var (
		gw  GatewayConfig
		ord OrdersConfig
		inv InventoryConfig
		bil BillingConfig
	)
	listen := func(cmd *cobra.Command, def string) *string {
		return cmd.Flags().String("listen", def, "listen `address`")
	}
	serveOne := func(cmd *cobra.Command, role, addr string, start func(net.Listener, *slog.Logger) (*server, error)) error {
		logger, err := newLogger(role)
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
		return waitAndStop(ctx, srv.stop)
	}

	invCmd := &cobra.Command{Use: "inventory", Short: "Serve Inventory (HTTP): reserve, release, stock, slow, and the drip and silent endpoints.", Args: cobra.NoArgs}
	invAddr := listen(invCmd, ":7002")
	inventoryFlags(invCmd.Flags(), &inv)
	invCmd.RunE = func(cmd *cobra.Command, _ []string) error {
		return serveOne(cmd, "inventory", *invAddr, func(ln net.Listener, l *slog.Logger) (*server, error) {
			_, srv, err := startInventory(ln, inv, *configFile, l)
			return srv, err
		})
	}

	bilCmd := &cobra.Command{Use: "billing", Short: "Serve Billing (gRPC): charge and slow.", Args: cobra.NoArgs}
	bilAddr := listen(bilCmd, ":7003")
	billingFlags(bilCmd.Flags(), &bil)
	bilCmd.RunE = func(cmd *cobra.Command, _ []string) error {
		return serveOne(cmd, "billing", *bilAddr, func(ln net.Listener, l *slog.Logger) (*server, error) {
			_, srv, err := startBilling(ln, bil, *configFile, l)
			return srv, err
		})
	}

	ordCmd := &cobra.Command{Use: "orders", Short: "Serve Orders (HTTP): submit, report, stock.", Args: cobra.NoArgs}
	ordAddr := listen(ordCmd, ":7001")
	ordCmd.Flags().StringVar(&ord.Inventory, "inventory", "http://127.0.0.1:7002", "Inventory's base `URL`")
	ordBilling := ordCmd.Flags().String("billing", "127.0.0.1:7003", "Billing's gRPC `address`")
	ordersFlags(ordCmd.Flags(), &ord)
	ordCmd.RunE = func(cmd *cobra.Command, _ []string) error {
		return serveOne(cmd, "orders", *ordAddr, func(ln net.Listener, l *slog.Logger) (*server, error) {
			_, srv, err := startOrders(ln, ord, *ordBilling, *configFile, l)
			return srv, err
		})
	}

	gwCmd := &cobra.Command{Use: "gateway", Short: "Serve the Gateway (HTTP): checkout, order, fanout.", Args: cobra.NoArgs}
	gwAddr := listen(gwCmd, ":7000")
	gwCmd.Flags().StringVar(&gw.Orders, "orders", "http://127.0.0.1:7001", "Orders' base `URL`")
	gwCmd.Flags().StringVar(&gw.Inventory, "inventory", "http://127.0.0.1:7002", "Inventory's base `URL`")
	gwCmd.Flags().StringVar(&gw.Billing, "billing", "127.0.0.1:7003", "Billing's gRPC `address`")
	gatewayFlags(gwCmd.Flags(), &gw)
	gwCmd.RunE = func(cmd *cobra.Command, _ []string) error {
		return serveOne(cmd, "gateway", *gwAddr, func(ln net.Listener, l *slog.Logger) (*server, error) {
			_, srv, err := startGateway(ln, gw, *configFile, l)
			return srv, err
		})
	}

	allCmd := &cobra.Command{Use: "all", Short: "Run the four roles in one process, on consecutive ports from --base-port.", Args: cobra.NoArgs}
	basePort := allCmd.Flags().Int("base-port", 7000, "gateway's port; orders, inventory and billing take the next three (0: any free ports)")
	host := allCmd.Flags().String("host", "127.0.0.1", "listen `host`")
	inventoryFlags(allCmd.Flags(), &inv)
	billingFlags(allCmd.Flags(), &bil)
	ordersFlags(allCmd.Flags(), &ord)
	gatewayFlags(allCmd.Flags(), &gw)
	allCmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if *basePort < 0 || *basePort > 65532 {
			return fmt.Errorf("--base-port: want 0 to 65532, got %d", *basePort)
		}
		cc := ClusterConfig{Gateway: gw, Orders: ord, Inventory: inv, Billing: bil, ConfigFile: *configFile, Listen: map[string]string{}}
		for i, r := range []string{"gateway", "orders", "inventory", "billing"} {
			port := 0
			if *basePort != 0 {
				port = *basePort + i
			}
			cc.Listen[r] = net.JoinHostPort(*host, strconv.Itoa(port))
		}
		var lerr error
		cc.Logger = func(role string) *slog.Logger {
			l, err := newLogger(role)
			lerr = err
			return l
		}
		c, err := StartCluster(cc)
		if err != nil {
			return err
		}
		if lerr != nil {
			c.Close(context.Background())
			return lerr
		}
		for _, r := range []string{"gateway", "orders", "inventory", "billing"} {
			fmt.Fprintf(cmd.OutOrStdout(), "%-9s listening on %s\n", r, c.Addrs[r])
		}
		return waitAndStop(ctx, c.Close)
	}

	root.AddCommand(gwCmd, ordCmd, invCmd, bilCmd, allCmd)
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(stderr, "chain:", err)
		return 1
	}
	return 0
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
