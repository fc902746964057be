package systemtest

import (
	"context"
	"errors"
	"net"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sundial-go/sundial/adapters/httpadapter"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
)

type browserFeedIn struct {
	Count int `query:"count" json:"count"`
}

type browserEvent struct {
	Seq int `json:"seq"`
}

// TestStreamInChromium: a real headless Chromium page reads a server
// stream with EventSource, then over a WebSocket: each message, then the
// outcome event, and the WebSocket's close code 1000.
func TestStreamInChromium(t *testing.T) {
	t.Parallel()
	bin := chromium(t)
	reg := operations.NewRegistry()
	err := operations.RegisterServerStream(reg, operations.Descriptor{ID: "feed.watch", Method: "GET", Path: "/feed"},
		func(_ context.Context, in browserFeedIn, s *operations.Sender[browserEvent]) error {
			for i := 1; i <= in.Count; i++ {
				if err := s.Send(browserEvent{i}); err != nil {
					return err
				}
			}
			return nil
		})
	if err != nil {
		t.Fatal(err)
	}
	k, err := kernel.New(kernel.WithRegistry(reg))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	e := echo.New()
	if _, err := httpadapter.Mount(e, k); err != nil {
		t.Fatal(err)
	}
	e.GET("/", func(c echo.Context) error { return c.HTML(http.StatusOK, "<!doctype html><title>streams</title>") })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: e, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = hs.Serve(ln)
	}()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = hs.Shutdown(ctx)
		<-served
	}()

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b := startBrowser(ctx, t, bin)
	if err := b.navigate("http://" + ln.Addr().String() + "/"); err != nil {
		t.Fatalf("open the page: %v", err)
	}
	var got struct {
		SSE        []int  `json:"sse"`
		SSEOutcome string `json:"sseOutcome"`
		WS         []int  `json:"ws"`
		WSOutcome  string `json:"wsOutcome"`
		WSClose    int    `json:"wsClose"`
		Error      string `json:"error"`
	}
	err = b.evaluate(`new Promise((resolve) => {
		const out = {sse: [], ws: []};
		const es = new EventSource("/feed?count=3");
		es.onmessage = (e) => out.sse.push(JSON.parse(e.data).seq);
		es.onerror = () => { out.error = "EventSource error"; es.close(); resolve(out); };
		es.addEventListener("outcome", (e) => {
			out.sseOutcome = JSON.parse(e.data).title;
			es.close();
			const ws = new WebSocket("ws://" + location.host + "/feed?count=2");
			ws.onopen = () => ws.send("{}");
			ws.onmessage = (m) => {
				const v = JSON.parse(m.data);
				if (v.outcome) { out.wsOutcome = v.outcome.title; } else { out.ws.push(v.seq); }
			};
			ws.onclose = (c) => { out.wsClose = c.code; resolve(out); };
		});
	})`, &got)
	if err != nil {
		t.Fatalf("run the page's streams: %v", err)
	}
	if got.Error != "" || !slices.Equal(got.SSE, []int{1, 2, 3}) || got.SSEOutcome != "OK" ||
		!slices.Equal(got.WS, []int{1, 2}) || got.WSOutcome != "OK" || got.WSClose != 1000 || len(got.SSE) == 0 {
		t.Fatalf("the page saw %+v; want SSE 1, 2, 3 then OK, WebSocket 1, 2 then OK and 1000", got)
	}
	if err := k.Wait(ctx); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
}
