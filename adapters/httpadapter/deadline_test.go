package httpadapter_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sundial-go/sundial/adapters/httpadapter"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
	"github.com/sundial-go/sundial/resilience"
)

func TestParseDeadline(t *testing.T) {
	tests := []struct {
		in   string
		want time.Time // zero: an error
	}{
		{"2026-03-01T12:00:02Z", time.Date(2026, 3, 1, 12, 0, 2, 0, time.UTC)},
		{"2026-03-01T12:00:02.5Z", time.Date(2026, 3, 1, 12, 0, 2, 500e6, time.UTC)},
		{"2026-03-01T12:00:02.123456789Z", time.Date(2026, 3, 1, 12, 0, 2, 123456789, time.UTC)},
		{"2024-02-29T23:59:59.000Z", time.Date(2024, 2, 29, 23, 59, 59, 0, time.UTC)},
		// Malformed and hostile.
		{"", time.Time{}},
		{"soon", time.Time{}},
		{"2026-03-01T12:00:02.1234567891Z", time.Time{}},                         // absurd precision
		{"2026-03-01T12:00:02." + strings.Repeat("9", 10000) + "Z", time.Time{}}, // absurd precision, long
		{"99999-03-01T12:00:02Z", time.Time{}},                                   // overflowing year
		{"2026-13-01T12:00:02Z", time.Time{}},                                    // month
		{"2026-02-30T12:00:02Z", time.Time{}},                                    // day
		{"2026-03-01T24:00:00Z", time.Time{}},                                    // hour
		{"2026-03-01T12:00:60Z", time.Time{}},                                    // leap second
		{"2026-03-01T12:00:02+01:00", time.Time{}},                               // not UTC
		{"2026-03-01T12:00:02+00:00", time.Time{}},                               // UTC, but spelled as an offset
		{"2026-03-01t12:00:02z", time.Time{}},                                    // lower case
		{"2026-03-01 12:00:02Z", time.Time{}},                                    // space for T
		{"2026-03-01T12:00:02.Z", time.Time{}},                                   // empty fraction
		{"2026-03-01T12:00:02,5Z", time.Time{}},                                  // comma
		{" 2026-03-01T12:00:02Z", time.Time{}},                                   // leading space
		{"2026-03-01T12:00:02Z\x00", time.Time{}},                                // NUL
		{"2026-03-01T12:00:02\x7fZ", time.Time{}},                                // DEL
		{"2026-03-01T12:00:\t2Z", time.Time{}},                                   // tab
		{"2026-03-01T12:00:02Z\r\nX-Evil: 1", time.Time{}},                       // header injection
		{"+2026-03-01T12:00:02Z", time.Time{}},                                   // sign
		{"-001-03-01T12:00:02Z", time.Time{}},                                    // negative year
		{"1767225600", time.Time{}},                                              // Unix seconds
		{"２０２６-03-01T12:00:02Z", time.Time{}},                                    // non-ASCII digits
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%.40q", tt.in), func(t *testing.T) {
			got, err := httpadapter.ParseDeadline(tt.in)
			if tt.want.IsZero() {
				if err == nil {
					t.Fatalf("ParseDeadline(%.60q) = %v, want an error", tt.in, got)
				}
				return
			}
			if err != nil || !got.Equal(tt.want) || got.Location() != time.UTC {
				t.Fatalf("ParseDeadline(%q) = %v, %v, want %v in UTC", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestParseTimeoutMs(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration // -1: an error
	}{
		{"0", 0},
		{"1992", 1992 * time.Millisecond},
		{"000250", 250 * time.Millisecond},
		{"999999999999", 999999999999 * time.Millisecond},
		{"", -1},
		{"9999999999999", -1},        // 13 digits
		{"99999999999999999999", -1}, // overflows int64
		{"-5", -1},
		{"+5", -1},
		{"1e3", -1},
		{"1.5", -1},
		{" 100", -1},
		{"100 ", -1},
		{"0x10", -1},
		{"10\x00", -1},
		{"١٠٠", -1}, // Arabic-Indic digits
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%q", tt.in), func(t *testing.T) {
			got, err := httpadapter.ParseTimeoutMs(tt.in)
			if tt.want < 0 {
				if err == nil {
					t.Fatalf("ParseTimeoutMs(%q) = %v, want an error", tt.in, got)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseTimeoutMs(%q) = %v, %v, want %v", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestFormatDeadline(t *testing.T) {
	d := time.Date(2026, 3, 1, 12, 0, 2, 123987654, time.FixedZone("X", 3600))
	got := httpadapter.FormatDeadline(d)
	if want := "2026-03-01T11:00:02.123Z"; got != want {
		t.Fatalf("FormatDeadline(%v) = %q, want %q", d, got, want)
	}
	back, err := httpadapter.ParseDeadline(got)
	if err != nil || back.After(d) || d.Sub(back) >= time.Millisecond {
		t.Fatalf("ParseDeadline(FormatDeadline(d)) = %v, %v, want at most 1ms before %v", back, err, d)
	}
	for _, tt := range []struct {
		in   time.Duration
		want string
	}{{1992900 * time.Microsecond, "1992"}, {-time.Second, "0"}, {999 * time.Microsecond, "0"}} {
		if got := httpadapter.FormatTimeoutMs(tt.in); got != tt.want {
			t.Errorf("FormatTimeoutMs(%v) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func FuzzParseDeadline(f *testing.F) {
	for _, s := range []string{"2026-03-01T12:00:02Z", "2026-03-01T12:00:02.123456789Z", "2026-03-01T12:00:02.1234567891Z",
		"2026-13-01T12:00:02Z", "2026-03-01T12:00:02+01:00", "", "Z", "0000-01-01T00:00:00Z", "9999-12-31T23:59:59.999999999Z"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := httpadapter.ParseDeadline(s)
		if err != nil {
			return
		}
		if len(s) > 30 || s[len(s)-1] != 'Z' || d.Location() != time.UTC {
			t.Fatalf("ParseDeadline(%q) = %v, accepted a value outside the format", s, d)
		}
		for i := 0; i < len(s); i++ {
			if c := s[i]; c < 0x20 || c > 0x7e {
				t.Fatalf("ParseDeadline(%q) accepted byte %#x", s, c)
			}
		}
		again, err := httpadapter.ParseDeadline(d.Format("2006-01-02T15:04:05.999999999Z"))
		if err != nil || !again.Equal(d) {
			t.Fatalf("ParseDeadline(%q) = %v, which does not round-trip: %v, %v", s, d, again, err)
		}
	})
}

func FuzzParseTimeoutMs(f *testing.F) {
	for _, s := range []string{"0", "1992", "999999999999", "9999999999999", "-1", "1e3", " 1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := httpadapter.ParseTimeoutMs(s)
		if err != nil {
			return
		}
		if d < 0 || d%time.Millisecond != 0 || len(s) > 12 {
			t.Fatalf("ParseTimeoutMs(%q) = %v", s, d)
		}
		if got := httpadapter.FormatTimeoutMs(d); strings.TrimLeft(s, "0") != strings.TrimLeft(got, "0") {
			t.Fatalf("ParseTimeoutMs(%q) = %v, formats back as %q", s, d, got)
		}
	})
}

func TestInboundDeadline(t *testing.T) {
	app := newTestApp()
	s := startServer(t, app, serverOpts{})
	past := time.Now().Add(-time.Second).UTC().Format(time.RFC3339Nano)
	tests := []struct {
		name   string
		header map[string]string
		status int
		code   string
		field  string
	}{
		{"past absolute deadline", map[string]string{httpadapter.HeaderDeadline: past}, 504, pipeline.CodeTimeout, ""},
		{"zero milliseconds left", map[string]string{httpadapter.DefaultRelativeDeadlineHeader: "0"}, 504, pipeline.CodeTimeout, ""},
		{"past absolute wins over a later relative", map[string]string{httpadapter.HeaderDeadline: past, httpadapter.DefaultRelativeDeadlineHeader: "5000"}, 504, pipeline.CodeTimeout, ""},
		{"malformed absolute", map[string]string{httpadapter.HeaderDeadline: "tomorrow"}, 400, "KERNEL_VALIDATION_002", httpadapter.HeaderDeadline},
		{"absurd precision", map[string]string{httpadapter.HeaderDeadline: "2099-01-01T00:00:00.1234567890123Z"}, 400, "KERNEL_VALIDATION_002", httpadapter.HeaderDeadline},
		{"overflowing year", map[string]string{httpadapter.HeaderDeadline: "292277026596-12-04T15:30:07Z"}, 400, "KERNEL_VALIDATION_002", httpadapter.HeaderDeadline},
		{"overflowing milliseconds", map[string]string{httpadapter.DefaultRelativeDeadlineHeader: "99999999999999999999"}, 400, "KERNEL_VALIDATION_002", httpadapter.DefaultRelativeDeadlineHeader},
		{"negative milliseconds", map[string]string{httpadapter.DefaultRelativeDeadlineHeader: "-100"}, 400, "KERNEL_VALIDATION_002", httpadapter.DefaultRelativeDeadlineHeader},
		{"tab inside the value", map[string]string{httpadapter.HeaderDeadline: "2099-01-01T00:00:00\tZ"}, 400, "KERNEL_VALIDATION_002", httpadapter.HeaderDeadline},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := app.calls.Load()
			r := s.do(t, "POST", "/work", `{"delayMs":0}`, tt.header)
			kind := "TIMEOUT"
			if tt.status == 400 {
				kind = "VALIDATION"
			}
			checkProblem(t, r, tt.status, kind, tt.code, "/work")
			if tt.field != "" && details(r)["field"] != tt.field {
				t.Errorf("details.field = %v, want %s", details(r)["field"], tt.field)
			}
			if n := app.calls.Load() - before; n != 0 {
				t.Errorf("the handler ran %d times, want never", n)
			}
		})
	}

	t.Run("repeated header", func(t *testing.T) {
		req, _ := http.NewRequest("POST", s.url+"/work", strings.NewReader(`{}`))
		req.Header.Add(httpadapter.HeaderDeadline, "2099-01-01T00:00:00Z")
		req.Header.Add(httpadapter.HeaderDeadline, "2099-01-01T00:00:01Z")
		checkProblem(t, s.send(t, req), 400, "VALIDATION", "KERNEL_VALIDATION_002", "/work")
	})

	t.Run("control characters", func(t *testing.T) {
		// Go's client refuses to send them; a raw connection does. Go's
		// server turns some away before the adapter sees them: either way
		// the answer is a 400 and the handler never runs.
		for _, v := range []string{"2099-01-01T00:00:00Z\x01", "2099-01-01T00:00\x7f:00Z", "\x1b[31m2099"} {
			before := app.calls.Load()
			status := rawStatus(t, s.url, "POST /work HTTP/1.1\r\nHost: x\r\nSundial-Deadline: "+v+"\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")
			if status != 400 || app.calls.Load() != before {
				t.Errorf("Sundial-Deadline %q: status %d (handler ran %v), want 400 without running", v, status, app.calls.Load() != before)
			}
		}
	})

	t.Run("a caller's deadline reaches the handler", func(t *testing.T) {
		want := time.Now().Add(3 * time.Second).UTC().Truncate(time.Millisecond)
		r := s.do(t, "POST", "/work", `{"delayMs":0}`, map[string]string{httpadapter.HeaderDeadline: httpadapter.FormatDeadline(want)})
		if r.status != 200 {
			t.Fatalf("status = %d %s, want 200", r.status, r.body)
		}
		app.mu.Lock()
		got := app.deadlines[len(app.deadlines)-1]
		app.mu.Unlock()
		if !got.Equal(want) {
			t.Errorf("handler's context deadline = %v, want the caller's %v", got, want)
		}
	})
}

// rawStatus sends raw bytes over a new connection and returns the
// response's status code.
func rawStatus(t *testing.T, url, raw string) int {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write([]byte(raw)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func TestDeadlineCapsAndSwitches(t *testing.T) {
	farFuture := map[string]string{httpadapter.HeaderDeadline: "2999-01-01T00:00:00Z"}
	tests := []struct {
		name    string
		config  string
		opts    []httpadapter.Option
		header  map[string]string
		body    string
		status  int
		minTook time.Duration
		maxTook time.Duration
	}{
		{"300 ms deadline on a 2 s call", "", nil,
			map[string]string{httpadapter.DefaultRelativeDeadlineHeader: "300"}, `{"delayMs":2000}`, 504, 300 * time.Millisecond, time.Second},
		{"far future capped by MaxTimeoutSeconds", `{"Sundial":{"Kernel":{"MaxTimeoutSeconds":0.3}}}`, nil,
			farFuture, `{"delayMs":2000}`, 504, 300 * time.Millisecond, time.Second},
		{"far future capped by TimeoutSeconds", `{"Sundial":{"Kernel":{"Resilience":{"Operations":{"work.run":{"TimeoutSeconds":0.3}}}}}}`, nil,
			farFuture, `{"delayMs":2000}`, 504, 300 * time.Millisecond, time.Second},
		{"untrusted edge ignores a malformed deadline", "", []httpadapter.Option{httpadapter.WithCallerDeadlines(false)},
			map[string]string{httpadapter.HeaderDeadline: "garbage"}, `{"delayMs":0}`, 200, 0, time.Second},
		{"untrusted edge ignores a past deadline", "", []httpadapter.Option{httpadapter.WithCallerDeadlines(false)},
			map[string]string{httpadapter.HeaderDeadline: "2001-01-01T00:00:00Z"}, `{"delayMs":0}`, 200, 0, time.Second},
		{"untrusted edge still caps", `{"Sundial":{"Kernel":{"MaxTimeoutSeconds":0.3}}}`, []httpadapter.Option{httpadapter.WithCallerDeadlines(false)},
			farFuture, `{"delayMs":2000}`, 504, 300 * time.Millisecond, time.Second},
		{"relative form switched off", "", []httpadapter.Option{httpadapter.WithRelativeDeadlineHeader("")},
			map[string]string{httpadapter.DefaultRelativeDeadlineHeader: "garbage"}, `{"delayMs":0}`, 200, 0, time.Second},
		{"relative form under another name", "", []httpadapter.Option{httpadapter.WithRelativeDeadlineHeader("x-deadline-ms")},
			map[string]string{"X-Deadline-Ms": "300"}, `{"delayMs":2000}`, 504, 300 * time.Millisecond, time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := startServer(t, newTestApp(), serverOpts{config: tt.config, adapter: tt.opts})
			start := time.Now()
			r := s.do(t, "POST", "/work", tt.body, tt.header)
			took := time.Since(start)
			if r.status != tt.status {
				t.Fatalf("status = %d %s, want %d", r.status, r.body, tt.status)
			}
			if tt.status == 504 {
				checkProblem(t, r, 504, "TIMEOUT", pipeline.CodeTimeout, "/work")
			}
			if took < tt.minTook || took > tt.maxTook {
				t.Errorf("the call took %v, want between %v and %v", took, tt.minTook, tt.maxTook)
			}
		})
	}
}

// A client that sends its headers and then dribbles its body is bounded by
// the deadline like everything else.
func TestSlowBodyEndsAtTheDeadline(t *testing.T) {
	app := newTestApp()
	s := startServer(t, app, serverOpts{})
	conn, err := net.Dial("tcp", strings.TrimPrefix(s.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	fmt.Fprintf(conn, "POST /work HTTP/1.1\r\nHost: x\r\nSundial-Timeout-Ms: 200\r\nContent-Length: 100\r\n\r\n{\"delayMs\":")
	conn.SetReadDeadline(start.Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	took := time.Since(start)
	if resp.StatusCode != 504 || took < 200*time.Millisecond || took > time.Second {
		t.Errorf("slow body: status %d after %v, want 504 between 200ms and 1s", resp.StatusCode, took)
	}
	if n := app.calls.Load(); n != 0 {
		t.Errorf("the handler ran %d times for a body that never arrived", n)
	}
	if rec := s.logs.waitRecord(t, "http request", "operation", "work.run", time.Second); rec.Attrs["code"] != pipeline.CodeTimeout || rec.Attrs["status"] != int64(504) {
		t.Errorf("access record = %v, want status 504, code %s", rec.Attrs, pipeline.CodeTimeout)
	}
}

// TestStragglerDoesNotHoldTheResponse: a handler that ignores its context
// does not hold its call's 504, which leaves at the deadline; it holds
// work.run's only concurrency slot until it returns, and its late result
// is logged.
func TestStragglerDoesNotHoldTheResponse(t *testing.T) {
	app := newTestApp()
	s := startServer(t, app, serverOpts{})
	// The straggler: a call whose handler started and ignores its
	// context. On a loaded machine the 200 ms can pass before the kernel
	// starts the handler, and it then does not run it: such a call leaves
	// no straggler, and is made again with ten times the deadline, at
	// most the 10 s of testConfig's MaxTimeoutSeconds, three tries in all.
	const maxTimeout = 10 * time.Second
	var r response
	for try, d := 1, 200*time.Millisecond; ; try, d = try+1, min(10*d, maxTimeout) {
		start := time.Now()
		r = s.do(t, "POST", "/work", `{"ignoreCtx":true}`,
			map[string]string{httpadapter.DefaultRelativeDeadlineHeader: strconv.FormatInt(d.Milliseconds(), 10)})
		took := time.Since(start)
		checkProblem(t, r, 504, "TIMEOUT", pipeline.CodeTimeout, "/work")
		if _, ok := pipelinetest.HandlerStarted(t, app.started, s.k.Running); ok {
			if took < d || took > d+500*time.Millisecond {
				t.Errorf("the 504 left after %v, want between %v and %v", took, d, d+500*time.Millisecond)
			}
			break
		}
		if try == 3 {
			t.Fatalf("work.run's handler did not start before its deadline in three tries (the last %v)", d)
		}
		t.Logf("the %v deadline passed before work.run's handler started: once more, with %v", d, min(10*d, maxTimeout))
		// The chain has returned: the try's records are all logged.
		s.logs.Reset()
	}
	// The straggler still holds work.run's only concurrency slot.
	r = s.do(t, "POST", "/work", `{"delayMs":0}`, nil)
	checkProblem(t, r, 503, "UNAVAILABLE", resilience.CodeConcurrencyLimited, "/work")

	time.Sleep(20 * time.Millisecond) // so that the late result is late enough to warn
	app.unblock()
	rec := s.logs.waitRecord(t, "kernel: late result discarded", "operation", "work.run", 5*time.Second)
	if late, _ := rec.Attrs["lateByMs"].(float64); rec.Level != slog.LevelWarn || rec.Attrs["code"] != pipeline.CodeTimeout || late < 20 {
		t.Errorf("late-result record = %v at %v, want WARN, code %s, lateByMs >= 20", rec.Attrs, rec.Level, pipeline.CodeTimeout)
	}
	// Slot given back once the handler returned.
	if r := s.do(t, "POST", "/work", `{"delayMs":0}`, nil); r.status != 200 {
		t.Errorf("after the straggler returned: status %d %s, want 200", r.status, r.body)
	}
	access := s.logs.records("http request")
	if len(access) != 3 || access[0].Attrs["status"] != int64(504) || access[0].Attrs["code"] != pipeline.CodeTimeout ||
		access[0].Attrs["traceId"] != rec.Attrs["traceId"] {
		t.Errorf("access records = %v, want three, the first with status 504, code %s and the late record's trace ID", access, pipeline.CodeTimeout)
	}
}

func TestClientDisconnectCancels(t *testing.T) {
	tests := []struct {
		name   string
		config string
	}{
		{"invocation with a deadline", ""},
		{"invocation without a deadline", `{"Sundial":{"Kernel":{"UseBuiltInMiddleware":false}}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			app := newTestApp()
			s := startServer(t, app, serverOpts{config: tt.config})
			conn, err := net.Dial("tcp", strings.TrimPrefix(s.url, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			body := `{"delayMs":5000}`
			fmt.Fprintf(conn, "POST /work HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
			select {
			case <-app.started:
			case <-time.After(5 * time.Second):
				t.Fatal("the handler did not start")
			}
			gone := time.Now()
			conn.Close()
			select {
			case ended := <-app.ctxDone:
				if d := ended.Sub(gone); d > 100*time.Millisecond {
					t.Errorf("the handler's context ended %v after the client left, want within 100ms", d)
				}
			case <-time.After(2 * time.Second):
				t.Fatal("the handler's context did not end after the client left")
			}
			rec := s.logs.waitRecord(t, "http request", "operation", "work.run", 2*time.Second)
			if rec.Attrs["code"] != pipeline.CodeCanceled || rec.Attrs["status"] != int64(408) {
				t.Errorf("access record = %v, want code %s status 408", rec.Attrs, pipeline.CodeCanceled)
			}
		})
	}
}

// flushRecorder is a ResponseRecorder that reports each Flush: only an
// answer given at the deadline is flushed by the adapter, so a report
// means the response left while the handler was still running.
type flushRecorder struct {
	*httptest.ResponseRecorder
	flushed chan struct{}
}

func (f *flushRecorder) Flush() {
	f.ResponseRecorder.Flush()
	f.flushed <- struct{}{}
}

// TestResponseOwnerAtTheDeadline checks, on a fake clock, who answers once
// an invocation's context ends: the chain's own outcome, on the request's
// goroutine, when the handler honours its context; else the kernel's
// TIMEOUT or CANCELLED 5 ms later (Outcome.Expired), which the adapter
// writes with Connection: close and flushes while the handler runs on,
// after which the kernel logs the late result once and nothing more is
// written or logged by the adapter.
func TestResponseOwnerAtTheDeadline(t *testing.T) {
	tests := []struct {
		name        string
		body        string
		cancelAfter time.Duration // the client goes away; 0: it stays
		wantStatus  int
		wantCode    string
		wantAt      time.Duration // when the response leaves
		wantLate    bool          // answered at the deadline, late result logged
	}{
		{"handler honours its context: the chain's 504", `{"delayMs":5000}`, 0, 504, pipeline.CodeTimeout, 100 * time.Millisecond, false},
		{"handler ignores its context: the guard's 504", `{"ignoreCtx":true}`, 0, 504, pipeline.CodeTimeout, 105 * time.Millisecond, true},
		{"client gone, handler honours its context", `{"delayMs":5000}`, 40 * time.Millisecond, 408, pipeline.CodeCanceled, 40 * time.Millisecond, false},
		{"client gone, handler ignores its context", `{"ignoreCtx":true}`, 40 * time.Millisecond, 408, pipeline.CodeCanceled, 45 * time.Millisecond, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				app := newTestApp()
				logs := newLogSink()
				k, err := kernel.New(kernel.WithRegistry(app.register(t)), kernel.WithConfigJSON([]byte(testConfig)), kernel.WithLogger(logs.Logger()))
				if err != nil {
					t.Fatal(err)
				}
				e := echo.New()
				if _, err := httpadapter.Mount(e, k, httpadapter.WithLogger(logs.Logger())); err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				if tt.cancelAfter > 0 {
					time.AfterFunc(tt.cancelAfter, cancel)
				}
				req := httptest.NewRequestWithContext(ctx, "POST", "/work", strings.NewReader(tt.body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set(httpadapter.DefaultRelativeDeadlineHeader, "100")
				rec := &flushRecorder{httptest.NewRecorder(), make(chan struct{}, 1)}
				served := make(chan struct{})
				start := time.Now()
				go func() {
					defer close(served)
					e.ServeHTTP(rec, req)
				}()

				atDeadline := false
				select {
				case <-served:
				case <-rec.flushed:
					atDeadline = true
				}
				if at := time.Since(start); at != tt.wantAt {
					t.Errorf("the response left at %v, want %v", at, tt.wantAt)
				}
				if atDeadline != tt.wantLate {
					t.Errorf("answered at the deadline = %v, want %v", atDeadline, tt.wantLate)
				}
				if atDeadline {
					select {
					case <-served:
						t.Error("ServeHTTP returned before the handler did")
					default:
					}
					if n := k.Running(); n != 1 {
						t.Errorf("kernel.Running() = %d with the straggler running, want 1", n)
					}
				}
				if rec.Code != tt.wantStatus {
					t.Errorf("status = %d, want %d; body %s", rec.Code, tt.wantStatus, rec.Body)
				}
				if got, want := rec.Header().Get("Connection"), map[bool]string{true: "close"}[tt.wantLate]; got != want {
					t.Errorf("Connection = %q, want %q", got, want)
				}
				if tt.wantLate {
					time.Sleep(20 * time.Millisecond) // late enough to warn
					app.unblock()
					<-served
				}
				var p httpadapter.Problem
				if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil || p.Code != tt.wantCode || p.Status != tt.wantStatus {
					t.Errorf("body = %s (%v), want exactly one problem with code %s", rec.Body, err, tt.wantCode)
				}
				access := logs.records("http request")
				if len(access) != 1 || access[0].Attrs["status"] != int64(tt.wantStatus) || access[0].Attrs["code"] != tt.wantCode {
					t.Errorf("access records = %v, want one with status %d code %s", access, tt.wantStatus, tt.wantCode)
				}
				late := logs.records("kernel: late result discarded")
				switch {
				case !tt.wantLate && len(late) != 0:
					t.Errorf("late-result records = %v, want none", late)
				case tt.wantLate && (len(late) != 1 || late[0].Level != slog.LevelWarn || late[0].Attrs["lateByMs"] != float64(20) ||
					late[0].Attrs["code"] != tt.wantCode || late[0].Attrs["operation"] != "work.run" || late[0].Attrs["protocol"] != "http"):
					t.Errorf("late-result records = %v, want one WARN for work.run over http with lateByMs 20, code %s", late, tt.wantCode)
				}
				if n := k.Running(); n != 0 {
					t.Errorf("kernel.Running() = %d after ServeHTTP returned, want 0", n)
				}
				time.Sleep(10 * time.Millisecond) // the guard's settle window ends
			})
		})
	}
}

// TestZeroTimeDeadlineIsPast: Sundial-Deadline 0001-01-01T00:00:00Z — the
// zero time.Time, which means "no deadline" inside the kernel — is a
// deadline long past: 504 at once, the handler never runs.
func TestZeroTimeDeadlineIsPast(t *testing.T) {
	app := newTestApp()
	s := startServer(t, app, serverOpts{})
	start := time.Now()
	r := s.do(t, "POST", "/work", `{"delayMs":1500}`, map[string]string{httpadapter.HeaderDeadline: "0001-01-01T00:00:00Z"})
	checkProblem(t, r, 504, "TIMEOUT", pipeline.CodeTimeout, "/work")
	took := time.Since(start)
	t.Logf("Sundial-Deadline 0001-01-01T00:00:00Z on a 1.5 s call: %d after %v, %d handler calls", r.status, took.Round(10*time.Microsecond), app.calls.Load())
	if took > time.Second || app.calls.Load() != 0 {
		t.Errorf("answered after %v with %d handler calls, want at once and none", took, app.calls.Load())
	}
}
