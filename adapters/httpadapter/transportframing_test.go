package httpadapter

import (
	"net/http"
	"testing"
)

// TestResponseFraming: the transport's idle clock counts SSE events with
// data and NDJSON lines with content, however the bytes are split; SSE
// comments, events without data and empty lines are heartbeats.
func TestResponseFraming(t *testing.T) {
	cases := []struct {
		contentType string
		body        string
		want        int // messages
	}{
		{"text/event-stream", "id: 1\nevent: message\ndata: {}\n\n", 1},
		{"text/event-stream; charset=utf-8", ":\n\n: ping\n\n", 0},
		{"text/event-stream", "id: 1\n\nretry: 10\n\n", 0},
		{"text/event-stream", "data: a\r\ndata: b\r\n\r\ndata\r\rdata: c\r\r", 3},
		{"text/event-stream", "database: x\n\n", 0},
		{"application/x-ndjson", "{}\n\n \n{\"a\":1}\r\n", 2},
		{"application/json", "{}", 0},
	}
	for _, tc := range cases {
		f := framingOf(&http.Response{Header: http.Header{"Content-Type": {tc.contentType}}})
		got := 0
		for i := range len(tc.body) { // one byte a read: each message ends in its own
			if f.feed([]byte{tc.body[i]}) {
				got++
			}
		}
		want := tc.want
		if tc.contentType == "application/json" {
			want = len(tc.body) // every read with bytes
		}
		if got != want {
			t.Errorf("%s %q byte by byte: %d messages, want %d", tc.contentType, tc.body, got, want)
		}
		whole := framingOf(&http.Response{Header: http.Header{"Content-Type": {tc.contentType}}})
		if ended := whole.feed([]byte(tc.body)); ended != (want > 0) {
			t.Errorf("%s %q in one read: a message ended %v, want %v", tc.contentType, tc.body, ended, want > 0)
		}
	}
}
