package httpadapter

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/sundial-go/sundial/resilience/stream"
)

// lazyWait is how long nums.lazy receives nothing: three times its
// heartbeat (0.05 s) plus its send stall (1 s).
const lazyWait = 3 * (50*time.Millisecond + time.Second)

// TestWebSocketHandlerNotReceiving: a bidi handler that calls no Recv
// for 3 × (heartbeat + send stall) keeps the stream of a caller who
// answers pings, even one whose messages fill the queue, and then
// receives and sends. A caller who answers no ping still ends the
// stream with KERNEL_CANCELLED_002, whether its messages fill the
// queue or not.
func TestWebSocketHandlerNotReceiving(t *testing.T) {
	for _, tc := range []struct {
		name    string
		sent    int  // messages the caller sends at once
		healthy bool // the caller reads (and so answers pings) and sends its last
	}{
		{"healthy", 2, true},
		{"healthy queue full", 3 * wsQueue, true},
		{"silent", 2, false},
		{"silent queue full", 3 * wsQueue, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // each waits out a close handshake; servers of their own
			s := startStreamServer(t, nil)
			var first []string
			for i := 1; i <= tc.sent; i++ {
				first = append(first, fmt.Sprintf(`{"n":%d}`, i))
			}
			if !tc.healthy {
				c := openStream(t, "ws", s.url+"/lazy", nil, first...)
				defer c.close()
				if r := s.accessRecord(t, "nums.lazy"); r.Attrs["code"] != stream.CodeSendStall {
					t.Fatalf("access log %v, want %s", r.Attrs, stream.CodeSendStall)
				}
				return
			}
			c := openStream(t, "ws", s.url+"/lazy", nil, append(first, "")...)
			defer c.close()
			got, err := readAll(c)
			if err != nil {
				t.Fatal(err)
			}
			if got.close != websocket.StatusNormalClosure || len(got.msgs) != tc.sent {
				t.Fatalf("%d messages, outcome %+v, close %d; want %d, then 1000",
					len(got.msgs), got.outcome, got.close, tc.sent)
			}
			for i, m := range got.msgs {
				var out sumOut
				if json.Unmarshal(m, &out) != nil || out.Total != 2*(i+1) {
					t.Fatalf("message %d is %s, want total %d", i, m, 2*(i+1))
				}
			}
			if got.heartbeats == 0 {
				t.Fatal("no ping reached the caller")
			}
		})
	}
}

// TestWebSocketQueueBounded: while the handler receives nothing, the
// reader holds at most wsQueue messages and then reads no more; the
// caller's other messages wait outside the stream. Each then arrives, in
// order.
func TestWebSocketQueueBounded(t *testing.T) {
	const sent = 50
	raws := make(chan *wsRaw, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		raw := newWSRaw(conn, 1<<10, false, func(error) {}, decodeNum)
		raws <- raw
		<-raw.done
	}))
	defer srv.Close()
	ctx := t.Context()
	conn, _, err := websocket.Dial(ctx, strings.Replace(srv.URL, "http:", "ws:", 1), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseNow()
	for i := 1; i <= sent; i++ {
		if err := conn.Write(ctx, websocket.MessageText, fmt.Appendf(nil, `{"n":%d}`, i)); err != nil {
			t.Fatal(err)
		}
	}
	go func() { // the caller reads, so it answers the server's close
		for {
			if _, _, err := conn.Read(ctx); err != nil {
				return
			}
		}
	}()
	raw := <-raws
	select {
	case <-raw.heldChan():
	case <-time.After(10 * time.Second):
		t.Fatal("the reader never waited for room")
	}
	if n := len(raw.msgs); n != wsQueue {
		t.Fatalf("%d messages queued, want %d", n, wsQueue)
	}
	for i := 1; i <= sent; i++ {
		m, _, err := raw.Recv()
		if err != nil || m.(*num).N != i {
			t.Fatalf("message %d: %v, %v", i, m, err)
		}
	}
	raw.Abort(nil)
	_ = raw.finish(nil, "", "")
}
