package systemtest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/websocket"
)

// This file is a small Chrome DevTools Protocol client, enough for the
// status-page test. It drives Debian's chromium without a browser-driver
// dependency: users of the module then download none. It sends one command
// at a time over the browser's websocket and waits for its answer; one
// goroutine reads the websocket, so a wait that gives up leaves the
// stream whole and the late answer is skipped by its ID.

// cdpOrigin is the Origin header of the websocket handshake; Chromium
// accepts it because the browser starts with --remote-allow-origins.
const cdpOrigin = "http://127.0.0.1"

// browser is a headless Chromium the test started, attached to its page.
type browser struct {
	ws      *websocket.Conn
	msgs    <-chan cdpMessage // the websocket's messages; closed when reading fails
	readErr error             // why reading failed; set before msgs is closed
	session string            // the page's flat session, set on every command
	next    int               // the ID of the last command sent
	events  map[string]int    // events of the page seen so far, by method
}

// errNoAnswer is the error of a command not answered within its bound.
var errNoAnswer = errors.New("no answer in time")

// cdpMessage is one message from the browser: the answer to a command
// (ID set) or an event (Method set).
type cdpMessage struct {
	ID        int             `json:"id"`
	Method    string          `json:"method"`
	SessionID string          `json:"sessionId"`
	Result    json.RawMessage `json:"result"`
	Error     *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// startBrowser starts bin headless with a fresh profile and attaches to its
// page. Every read and write ends by ctx's deadline. The browser and all
// its processes are killed and waited for when the test ends.
func startBrowser(ctx context.Context, t *testing.T, bin string) *browser {
	t.Helper()
	wsURL := launchChromium(ctx, t, bin)
	ws, err := websocket.Dial(wsURL, "", cdpOrigin)
	if err != nil {
		t.Fatalf("connect to chromium's DevTools: %v", err)
	}
	if deadline, ok := ctx.Deadline(); ok {
		if err := ws.SetDeadline(deadline); err != nil {
			ws.Close()
			t.Fatal(err)
		}
	}
	msgs, stop, read := make(chan cdpMessage, 64), make(chan struct{}), make(chan struct{})
	b := &browser{ws: ws, msgs: msgs, events: map[string]int{}}
	go func() {
		defer close(read)
		defer close(msgs)
		for {
			var in cdpMessage
			if err := websocket.JSON.Receive(ws, &in); err != nil {
				b.readErr = err
				return
			}
			select {
			case msgs <- in:
			case <-stop:
				return
			}
		}
	}()
	t.Cleanup(func() {
		close(stop)
		ws.Close()
		<-read
	})
	if err := b.attach(ctx); err != nil {
		t.Fatalf("attach to chromium's page: %v", err)
	}
	return b
}

// launchChromium starts bin in a process group of its own and returns the
// browser's DevTools websocket URL, read off its stderr.
func launchChromium(ctx context.Context, t *testing.T, bin string) string {
	t.Helper()
	cmd := exec.Command(bin, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
		"--no-first-run", "--disable-background-networking", "--disable-component-update",
		"--disable-sync", "--window-size=1280,800", "--remote-allow-origins="+cdpOrigin,
		"--user-data-dir="+t.TempDir(), "--remote-debugging-port=0", "about:blank")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stderr, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = w
	if err := cmd.Start(); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	w.Close()
	urls, drained := make(chan string, 1), make(chan []string, 1)
	go scanStderr(stderr, urls, drained)
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // the whole group: renderers too
		_ = cmd.Wait()
		stderr.Close()
		<-drained
	})
	select {
	case u := <-urls:
		return u
	case lines := <-drained:
		t.Fatalf("chromium exited before it listened:\n%s", strings.Join(lines, "\n"))
	case <-ctx.Done():
		t.Fatalf("chromium did not listen: %v", ctx.Err())
	}
	return ""
}

// scanStderr sends the URL of chromium's "DevTools listening on" line to
// urls, and reads the rest so that chromium never blocks on a full pipe.
// At the end it sends the lines read before the URL to drained.
func scanStderr(stderr *os.File, urls chan<- string, drained chan<- []string) {
	var before []string
	found := false
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		line := sc.Text()
		if u, ok := strings.CutPrefix(line, "DevTools listening on "); ok && !found {
			found = true
			urls <- strings.TrimSpace(u)
		} else if !found && len(before) < 50 {
			before = append(before, line)
		}
	}
	drained <- before
}

// attach finds the browser's page and attaches to it in flat mode: later
// commands carry the session's ID on the one websocket.
func (b *browser) attach(ctx context.Context) error {
	var targets struct {
		TargetInfos []struct{ TargetID, Type string } `json:"targetInfos"`
	}
	for ctx.Err() == nil {
		if err := b.call("Target.getTargets", nil, &targets); err != nil {
			return err
		}
		for _, ti := range targets.TargetInfos {
			if ti.Type == "page" {
				var attached struct{ SessionID string }
				if err := b.call("Target.attachToTarget", map[string]any{"targetId": ti.TargetID, "flatten": true}, &attached); err != nil {
					return err
				}
				b.session = attached.SessionID
				return b.call("Page.enable", nil, nil)
			}
		}
		time.Sleep(20 * time.Millisecond) // the first page is not there yet
	}
	return ctx.Err()
}

// call sends one command and waits for its answer, decoded into result
// (if not nil). Events read meanwhile are counted in b.events.
func (b *browser) call(method string, params, result any) error {
	return b.callWithin(0, method, params, result)
}

// callWithin is call with the wait for the answer bounded by d (0: by
// the websocket's deadline only). It returns errNoAnswer past d.
func (b *browser) callWithin(d time.Duration, method string, params, result any) error {
	var timeout <-chan time.Time
	if d > 0 {
		tm := time.NewTimer(d)
		defer tm.Stop()
		timeout = tm.C
	}
	b.next++
	msg := map[string]any{"id": b.next, "method": method}
	if params != nil {
		msg["params"] = params
	}
	if b.session != "" {
		msg["sessionId"] = b.session
	}
	if err := websocket.JSON.Send(b.ws, msg); err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	for {
		in, err := b.receive(timeout)
		switch {
		case err != nil:
			return fmt.Errorf("%s: %w", method, err)
		case in.ID != b.next:
			continue
		case in.Error != nil:
			return fmt.Errorf("%s: %s (%d)", method, in.Error.Message, in.Error.Code)
		case result != nil:
			return json.Unmarshal(in.Result, result)
		}
		return nil
	}
}

// receive returns the next message, counting it if it is an event of
// the page, or errNoAnswer once timeout fires (nil: never).
func (b *browser) receive(timeout <-chan time.Time) (cdpMessage, error) {
	select {
	case in, ok := <-b.msgs:
		if !ok {
			return in, b.readErr
		}
		if in.Method != "" && in.SessionID == b.session {
			b.events[in.Method]++
		}
		return in, nil
	case <-timeout:
		return cdpMessage{}, errNoAnswer
	}
}

// navigate opens url in the page and waits for its load event.
func (b *browser) navigate(url string) error {
	loads := b.events["Page.loadEventFired"]
	var nav struct{ ErrorText string }
	if err := b.call("Page.navigate", map[string]any{"url": url}, &nav); err != nil {
		return err
	}
	if nav.ErrorText != "" {
		return errors.New(nav.ErrorText)
	}
	for b.events["Page.loadEventFired"] == loads {
		if _, err := b.receive(nil); err != nil {
			return fmt.Errorf("wait for the load of %s: %w", url, err)
		}
	}
	return nil
}

// evaluate runs expr in the page, awaiting it if it is a promise, and
// decodes its value into result.
func (b *browser) evaluate(expr string, result any) error {
	var out struct {
		Result           struct{ Value json.RawMessage }
		ExceptionDetails *struct {
			Text      string
			Exception struct{ Description string }
		}
	}
	params := map[string]any{"expression": expr, "awaitPromise": true, "returnByValue": true}
	if err := b.call("Runtime.evaluate", params, &out); err != nil {
		return err
	}
	if ex := out.ExceptionDetails; ex != nil {
		return fmt.Errorf("%s %s", ex.Text, ex.Exception.Description)
	}
	return json.Unmarshal(out.Result.Value, result)
}

// waitJS is a promise for the innerText of the first element matching the
// selector (%s) once the document has loaded — and, if %t, once the element
// is visible (it has a box, as chromedp's WaitVisible checks). If %t, the
// page stops loading in the same task, before anything else can run:
// window.stop() cancels the page's scheduled reload (a meta refresh), so
// the page normally stays as read. A reload the browser had already begun
// to commit may still replace it; what the test reads after holds in
// either document (the breaker stays open for a minute).
const waitJS = `new Promise((resolve) => {
	const sel = %s, visible = %t, freeze = %t;
	const shown = (el) => Boolean(el.offsetWidth || el.offsetHeight || el.getClientRects().length);
	const tick = () => {
		const el = document.readyState === "complete" && document.querySelector(sel);
		if (el && (!visible || shown(el))) {
			if (freeze) window.stop();
			resolve(el.innerText);
			return;
		}
		setTimeout(tick, 50);
	};
	tick();
})`

// until is what text waits for besides an element matching its selector.
type until int

const (
	present        until = iota // the element is in the loaded document
	shownThenStill              // and visible; then the page stops reloading itself
)

// text waits until an element matches sel (and what u asks) and returns
// its innerText. The page reloads itself, which ends a wait in progress;
// text then waits again in the new document, until ctx ends.
func (b *browser) text(ctx context.Context, sel string, u until) (string, error) {
	quoted, err := json.Marshal(sel)
	if err != nil {
		return "", err
	}
	expr := fmt.Sprintf(waitJS, quoted, u != present, u == shownThenStill)
	for {
		var s string
		err := b.evaluate(expr, &s)
		if err == nil {
			return s, nil
		}
		if ctx.Err() != nil {
			return "", fmt.Errorf("%s: %w (%w)", sel, err, ctx.Err())
		}
		time.Sleep(20 * time.Millisecond) // a reload destroyed the document
	}
}

// captureWithin bounds one Page.captureScreenshot. A healthy capture of
// the status page takes well under a second.
const captureWithin = 10 * time.Second

// screenshot returns a PNG of the whole page, beyond the viewport too.
//
// Headless Chromium captures from the compositor's next frame, and a
// compositor gone idle over a page that does not change may not draw one:
// the capture then never answers. So the page is brought to the front
// first, the capture is bounded by captureWithin, and a capture not
// answered in time is tried once more after a short screencast, which
// makes the compositor draw.
func (b *browser) screenshot() ([]byte, error) {
	if err := b.call("Page.bringToFront", nil, nil); err != nil {
		return nil, err
	}
	var m struct {
		CSSContentSize struct{ Width, Height float64 } `json:"cssContentSize"`
	}
	if err := b.call("Page.getLayoutMetrics", nil, &m); err != nil {
		return nil, err
	}
	clip := map[string]any{"x": 0, "y": 0, "width": m.CSSContentSize.Width, "height": m.CSSContentSize.Height, "scale": 1}
	params := map[string]any{"format": "png", "captureBeyondViewport": true, "clip": clip}
	var shot struct{ Data []byte } // base64 in JSON
	err := b.callWithin(captureWithin, "Page.captureScreenshot", params, &shot)
	if !errors.Is(err, errNoAnswer) {
		return shot.Data, err
	}
	first := err
	if err := b.call("Page.startScreencast", map[string]any{"format": "jpeg", "quality": 10, "everyNthFrame": 1}, nil); err != nil {
		return nil, fmt.Errorf("after a capture not answered (%v): %w", first, err)
	}
	time.Sleep(250 * time.Millisecond)
	if err := b.call("Page.stopScreencast", nil, nil); err != nil {
		return nil, fmt.Errorf("after a capture not answered (%v): %w", first, err)
	}
	if err := b.callWithin(captureWithin, "Page.captureScreenshot", params, &shot); err != nil {
		return nil, fmt.Errorf("captured neither at first (%v) nor after a screencast: %w", first, err)
	}
	return shot.Data, nil
}
