package shopcmd

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/sundial-go/sundial/kernel"
)

// startReloading reloads the kernel's configuration on SIGHUP and, when
// the shop has a config file (--config), whenever that file changes
// (kernel.WatchConfig: editors' renames and ConfigMap symlink swaps
// included). A reload applies the new limits in place or, when the
// document is invalid, keeps the ones in force and logs why. The
// listen addresses (--http, --grpc) are flags, read at start-up only.
// The returned function stops both and waits for them.
func startReloading(ctx context.Context, k *kernel.Kernel, configFile string, logger *slog.Logger) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	wg.Go(func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				logger.Info("shop: SIGHUP: reloading the configuration")
				_, _ = k.Reload() // the kernel logs the result
			}
		}
	})
	if configFile != "" {
		wg.Go(func() {
			if err := k.WatchConfig(ctx, 0); err != nil {
				logger.Warn("shop: not watching the config file; SIGHUP still reloads", "error", err.Error())
			}
		})
	}
	return func() {
		signal.Stop(hup)
		cancel()
		wg.Wait()
	}
}
