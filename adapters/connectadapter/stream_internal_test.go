package connectadapter

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"connectrpc.com/connect"
)

// TestResetWaitsForTheCallersEnd: a caller's reset can fail a blocked
// Receive before the request's context ends (net/http's HTTP/2 server
// closes the body first). failed waits for the caller's end, so the
// kernel sees the caller leave, not a transport failure.
func TestResetWaitsForTheCallersEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		caller, leave := context.WithCancel(context.Background())
		r := &connRaw{ctx: context.Background(), caller: caller}
		reset := connect.NewError(connect.CodeCanceled, errors.New("stream error: stream ID 1; CANCEL"))
		done := make(chan error, 1)
		go func() { done <- r.failed(reset) }()
		synctest.Wait()
		select {
		case <-done:
			t.Fatal("failed returned before the caller's end was known")
		default:
		}
		leave()
		if err := <-done; !errors.Is(err, reset) {
			t.Errorf("failed returned %v, want the reset", err)
		}

		// Any other error, with the request still open, is the
		// transport's: failed returns at once.
		other := connect.NewError(connect.CodeInternal, errors.New("stream error: stream ID 3; INTERNAL_ERROR"))
		r = &connRaw{ctx: context.Background(), caller: context.Background()}
		if err := r.failed(other); !errors.Is(err, other) {
			t.Errorf("failed returned %v, want %v", err, other)
		}

		// A Canceled error whose caller never leaves holds the stream
		// for a moment only.
		start := time.Now()
		r = &connRaw{ctx: context.Background(), caller: context.Background()}
		if err := r.failed(reset); !errors.Is(err, reset) || time.Since(start) > time.Minute {
			t.Errorf("failed returned %v after %v, want the reset within a minute", err, time.Since(start))
		}
	})
}
