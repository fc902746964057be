package systemtest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sundial-go/sundial/samples/shop/internal/shopcmd"
)

// chromium returns the path of Debian's chromium: a failure in CI when it
// is missing (`make deps` installs it), a skip elsewhere.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "chromium not found; run `make deps` (or: apt-get install -y chromium)"
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// TestStatusPageInChromium opens the shop's status page in a real headless
// Chromium, opens billing.charge's breaker with failing calls, and waits
// for the page — reloading itself — to show it open with the time until
// it half-opens. The screenshot is kept as a test artifact (go test
// -artifacts keeps it; the test logs its path).
func TestStatusPageInChromium(t *testing.T) {
	t.Parallel()
	bin := chromium(t)
	cfg := writeConfig(t, `{"Sundial":{"Kernel":{"Resilience":{"Operations":{
		"billing.charge":{"FailureThreshold":3,"BreakSeconds":60},
		"orders.create":{"PermitLimit":5,"WindowSeconds":60,"ConcurrencyLimit":2}}}}}}`)
	s := startShopHTTP(t, shopcmd.ServeOptions{ConfigFile: cfg})

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b := startBrowser(ctx, t, bin)

	const breakerCell = `tr[id="op-billing.charge"] td.breaker`
	if err := b.navigate(s.url + "/debug/sundial"); err != nil {
		t.Fatalf("open the status page: %v", err)
	}
	before, err := b.text(ctx, breakerCell, present)
	if err != nil {
		t.Fatalf("read the breaker cell: %v", err)
	}
	if strings.TrimSpace(before) != "closed" {
		t.Fatalf("billing.charge's breaker shows %q before any failure, want closed", before)
	}
	for range 3 {
		if r := s.call(t, "POST", "/billing/charge", `{"amount":1,"fail":true}`, nil); r.status != 503 {
			t.Fatalf("failing charge: status %d %s", r.status, r.body)
		}
	}
	if r := s.call(t, "POST", "/billing/charge", `{"amount":1}`, nil); r.status != 503 || r.problem["code"] != "KERNEL_UNAVAILABLE_004" {
		t.Fatalf("after 3 failures: status %d %v, want the open breaker's 503", r.status, r.problem)
	}
	// No navigation from here: the page reloads itself. Once it shows the
	// breaker open, it is held still, so that the reads and the screenshot
	// below are of that document.
	start := time.Now()
	if _, err := b.text(ctx, `tr[id="op-billing.charge"] td.breaker.open`, shownThenStill); err != nil {
		t.Fatalf("the page never showed the breaker open: %v", err)
	}
	after, err := b.text(ctx, breakerCell, present)
	if err != nil {
		t.Fatal(err)
	}
	page, err := b.text(ctx, "body", present)
	if err != nil {
		t.Fatal(err)
	}
	shot, err := b.screenshot()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(after, "open") || !strings.Contains(after, "half-opens in") {
		t.Fatalf("breaker cell %q, want open with the time until it half-opens", after)
	}
	for _, want := range []string{"orders.create", "5 per 1m0s", "2 at once", "breaker 1", "Stragglers"} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q:\n%s", want, page)
		}
	}
	path := filepath.Join(t.ArtifactDir(), "status-page.png")
	if err := os.WriteFile(path, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("the page showed the breaker open %v after it opened; screenshot %s (%d bytes)", time.Since(start).Round(time.Millisecond), path, len(shot))
}
