package httpadapter

import (
	"context"
	"errors"
	"io"
	"testing"
	"testing/synctest"

	"github.com/sundial-go/sundial/adapters/internal/ndjson"
)

// failingBody fails every read with err.
type failingBody struct{ err error }

func (b failingBody) Read([]byte) (int, error) { return 0, b.err }

// TestResetWaitsForTheRequestsEnd: over HTTP/2 a caller's reset fails the
// body's read before net/http cancels the request's context. Recv returns
// only once the context has ended, so the kernel sees the caller leave,
// not a transport failure. Any other read error returns at once.
func TestResetWaitsForTheRequestsEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, leave := context.WithCancel(context.Background())
		reset := errors.New("stream error: stream ID 1; CANCEL")
		r := &httpRaw{body: ndjson.NewReader(failingBody{reset}, 1<<10), h2: ctx}
		done := make(chan error, 1)
		go func() {
			_, _, err := r.Recv()
			done <- err
		}()
		synctest.Wait()
		select {
		case <-done:
			t.Fatal("Recv returned before the request's context ended")
		default:
		}
		leave()
		if err := <-done; !errors.Is(err, reset) {
			t.Errorf("Recv returned %v, want the reset", err)
		}

		r = &httpRaw{body: ndjson.NewReader(failingBody{io.ErrUnexpectedEOF}, 1<<10), h2: context.Background()}
		if _, _, err := r.Recv(); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("Recv returned %v, want %v", err, io.ErrUnexpectedEOF)
		}
	})
}
