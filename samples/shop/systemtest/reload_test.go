package systemtest

import (
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/samples/shop/internal/shopcmd"
)

func exportLimitDoc(n int) string {
	return `{"Sundial":{"Kernel":{"Resilience":{"Operations":{"reports.export":{"PermitLimit":` + string(rune('0'+n)) + `,"WindowSeconds":3600}}}}}}`
}

// renameOver writes doc next to path and renames it over path.
func renameOver(t *testing.T, path, doc string) {
	t.Helper()
	if err := os.WriteFile(path+".tmp", []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

// raisedTo2More checks the shop's reports.export is at its limit (503),
// then calls until the raised limit admits one (at most 10 s) and checks
// that exactly 2 calls are admitted in all: the permits used before the
// reload are kept.
func raisedTo2More(t *testing.T, s *shopServer, reload func()) {
	t.Helper()
	for i := range 3 {
		if r := s.call(t, "POST", "/reports/export", `{"delayMs":0}`, nil); r.status != 200 && i < 2 || r.status != 503 && i == 2 {
			t.Fatalf("call %d: status %d %s", i, r.status, r.body)
		}
	}
	reload()
	deadline := time.Now().Add(10 * time.Second)
	for s.call(t, "POST", "/reports/export", `{"delayMs":0}`, nil).status != 200 {
		if time.Now().After(deadline) {
			t.Fatal("the new limit was not applied within 10 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if r := s.call(t, "POST", "/reports/export", `{"delayMs":0}`, nil); r.status != 200 {
		t.Fatalf("second call after the reload: %d", r.status)
	}
	if r := s.call(t, "POST", "/reports/export", `{"delayMs":0}`, nil); r.status != 503 {
		t.Fatalf("third call after the reload: %d, want 503 (2 used + 2 = 4)", r.status)
	}
}

// TestShopReloadsOnSIGHUP: the shop reloads its configuration on SIGHUP:
// reports.export's PermitLimit 2 -> 4 applies in place, keeping the 2
// permits used in the window.
func TestShopReloadsOnSIGHUP(t *testing.T) {
	cfg := writeConfig(t, exportLimitDoc(2))
	// The file through the kernel only: no watcher, SIGHUP alone reloads.
	s := startShopHTTP(t, shopcmd.ServeOptions{KernelOptions: []kernel.Option{kernel.WithConfigFile(cfg)}})
	raisedTo2More(t, s, func() {
		renameOver(t, cfg, exportLimitDoc(4))
		if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
	})
}

// TestShopReloadsOnFileChange: with --config, the shop reloads when the
// file is replaced (renamed over).
func TestShopReloadsOnFileChange(t *testing.T) {
	cfg := writeConfig(t, exportLimitDoc(2))
	s := startShopHTTP(t, shopcmd.ServeOptions{ConfigFile: cfg})
	raisedTo2More(t, s, func() { renameOver(t, cfg, exportLimitDoc(4)) })
}
