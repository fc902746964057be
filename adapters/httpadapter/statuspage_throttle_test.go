package httpadapter_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/sundial-go/sundial/adapters/httpadapter"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/pipeline"
)

// TestStatusPageShowsTheThrottle: over 127.0.0.1, the status page has a
// line per configured dependency. A throttled one shows its window's
// requests and accepts and its rejection probability; another shows "off".
func TestStatusPageShowsTheThrottle(t *testing.T) {
	k, err := kernel.New(kernel.WithConfigJSON([]byte(`{"Sundial":{"Kernel":{"Dependencies":{
		"billing":{"Attempts":1,"Breaker":{"FailureThreshold":0},"Throttle":{"Enabled":true}},
		"inventory":{}}}}}`)))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	billing := k.Dependency("billing")
	down := pipeline.NewError(pipeline.KindUnavailable, "X_UNAVAILABLE_001", "down")
	for _, answer := range []error{nil, nil, down, down, down} {
		_ = billing.Do(t.Context(), func(context.Context) error { return answer })
	} // the probability stays 0 until the last answer: then (5 − 2·2) / 6
	page := fetchStatusPage(t, k)
	for _, want := range []string{
		`<tr id="dep-billing">`,
		`<td class="throttle">requests 5, accepts 2, rejection 16.7 %<br>refused 0</td>`,
		`<tr id="dep-inventory">`,
		`<td class="throttle"><span class="muted">off</span></td>`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the status page lacks %q:\n%s", want, page)
		}
	}
}

// fetchStatusPage serves k's status page on 127.0.0.1 and returns it.
func fetchStatusPage(t *testing.T, k *kernel.Kernel) string {
	t.Helper()
	e := echo.New()
	e.GET("/debug/sundial", httpadapter.StatusPage(k, 0))
	srv := httptest.NewServer(e)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/debug/sundial")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return string(body)
}
