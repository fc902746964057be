package httpadapter_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
)

// idleRaw is a transport stream that carries nothing until aborted.
type idleRaw struct{ abort chan struct{} }

func (r idleRaw) Send(any) error          { <-r.abort; return errors.New("aborted") }
func (r idleRaw) Recv() (any, int, error) { <-r.abort; return nil, 0, errors.New("aborted") }
func (r idleRaw) Abort(error)             { close(r.abort) }

// TestStatusPageShowsOpenStreams: the status page shows a streaming
// operation's open streams of its MaxStreams.
func TestStatusPageShowsOpenStreams(t *testing.T) {
	reg := operations.NewRegistry()
	opened := make(chan struct{})
	if err := operations.RegisterServerStream(reg, operations.Descriptor{ID: "orders.watch"},
		func(ctx context.Context, _ struct{}, _ *operations.Sender[struct{}]) error {
			close(opened)
			<-ctx.Done()
			return ctx.Err()
		}); err != nil {
		t.Fatal(err)
	}
	k, err := kernel.New(kernel.WithRegistry(reg), kernel.WithConfigJSON([]byte(`{"Sundial":{"Kernel":{"Resilience":{
		"Operations":{"orders.watch":{"Stream":{"MaxStreams":3}}}}}}}`)))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	ctx, leave := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		k.Operations()[0].Stream(ctx, kernel.StreamCall{Input: &struct{}{}, Raw: idleRaw{make(chan struct{})}})
	}()
	<-opened
	page := fetchStatusPage(t, k)
	leave()
	<-done
	for _, want := range []string{`<td class="limit">1 of 3<br>open streams 1 of 3</td>`, `3 at once`} {
		if !strings.Contains(page, want) {
			t.Errorf("the status page lacks %q:\n%s", want, page)
		}
	}
}
