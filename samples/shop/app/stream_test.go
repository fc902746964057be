package app_test

import (
	"context"
	"errors"
	"io"
	"sync"
	"testing"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/samples/shop/app"
)

// pipeRaw is a transport stream over channels: in is what the caller
// sends (closed: its last), out what it reads. Like a connection, it
// fails once the caller, whose context is caller, has left.
type pipeRaw struct {
	in, out chan any
	abort   chan struct{}
	once    sync.Once
	caller  context.Context
}

func newPipeRaw(caller context.Context) *pipeRaw {
	return &pipeRaw{in: make(chan any, 8), out: make(chan any), abort: make(chan struct{}), caller: caller}
}

func (r *pipeRaw) Send(m any) error {
	select {
	case r.out <- m:
		return nil
	case <-r.abort:
		return errors.New("aborted")
	case <-r.caller.Done():
		return errors.New("reset by the caller")
	}
}

func (r *pipeRaw) Recv() (any, int, error) {
	select {
	case m, ok := <-r.in:
		if !ok {
			return nil, 0, io.EOF
		}
		return m, 64, nil
	case <-r.abort:
		return nil, 0, errors.New("aborted")
	case <-r.caller.Done():
		return nil, 0, errors.New("reset by the caller")
	}
}

func (r *pipeRaw) Abort(error) { r.once.Do(func() { close(r.abort) }) }

func shopKernel(t *testing.T) (*app.Shop, *kernel.Kernel) {
	t.Helper()
	s, reg := app.New(), operations.NewRegistry()
	if err := s.Register(reg); err != nil {
		t.Fatal(err)
	}
	k, err := kernel.New(kernel.WithRegistry(reg), kernel.WithConfigJSON(app.DefaultConfig))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { k.Close() })
	return s, k
}

func findOp(k *kernel.Kernel, id string) *kernel.Op {
	for _, op := range k.Operations() {
		if op.Descriptor().ID == id {
			return op
		}
	}
	return nil
}

// TestWatchOrders: orders.watch sends the orders created after the
// caller's sequence number, then each new one. A resume cursor takes the
// place of the request's sequence number. The caller leaving ends it.
func TestWatchOrders(t *testing.T) {
	s, k := shopKernel(t)
	for _, name := range []string{"a", "b", "c"} {
		if _, err := s.CreateOrder(t.Context(), app.CreateOrder{Name: name, Amount: 1}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		after  int
		resume string
		first  int
	}{{0, "", 1}, {1, "", 2}, {0, "2", 3}} {
		ctx, leave := context.WithCancel(t.Context())
		raw := newPipeRaw(ctx)
		done := make(chan kernel.Outcome, 1)
		go func() {
			done <- findOp(k, "orders.watch").Stream(ctx, kernel.StreamCall{Input: &app.WatchOrders{After: tc.after},
				Resume: tc.resume, Raw: raw})
		}()
		for seq := tc.first; seq <= 3; seq++ {
			if ev := (<-raw.out).(app.OrderEvent); ev.Seq != seq {
				t.Fatalf("after %d, resume %q: event %+v, want seq %d", tc.after, tc.resume, ev, seq)
			}
		}
		if tc.first == 1 { // a new order reaches the watcher
			o, _ := s.CreateOrder(t.Context(), app.CreateOrder{Name: "d", Amount: 1})
			if ev := (<-raw.out).(app.OrderEvent); ev.Seq != 4 || ev.Order != o {
				t.Fatalf("event %+v, want seq 4 of %+v", ev, o)
			}
		}
		leave()
		if out := <-done; pipeline.AsError(out.Err).Code() != pipeline.CodeCanceled {
			t.Fatalf("outcome %v, want CANCELLED", out.Err)
		}
	}
}

// TestImportOrders: orders.import creates an order per line. A line that
// fails its constraints ends the stream with VALIDATION; the orders
// created before it stay.
func TestImportOrders(t *testing.T) {
	s, k := shopKernel(t)
	raw := newPipeRaw(t.Context())
	raw.in <- &app.CreateOrder{Name: "a", Amount: 1}
	raw.in <- &app.CreateOrder{Name: "b", Amount: 2}
	close(raw.in)
	out := findOp(k, "orders.import").Stream(t.Context(), kernel.StreamCall{Raw: raw})
	if out.Err != nil || out.Output != (app.Imported{Created: 2, First: "ord-1", Last: "ord-2"}) {
		t.Fatalf("outcome %+v, %v", out.Output, out.Err)
	}
	raw = newPipeRaw(t.Context())
	raw.in <- &app.CreateOrder{Name: "c", Amount: 3}
	raw.in <- &app.CreateOrder{Name: "d", Amount: 0} // below the minimum
	close(raw.in)
	out = findOp(k, "orders.import").Stream(t.Context(), kernel.StreamCall{Raw: raw})
	if e := pipeline.AsError(out.Err); e.Code() != operations.CodeConstraint {
		t.Fatalf("outcome %v, want %s", out.Err, operations.CodeConstraint)
	}
	if _, err := s.GetOrder(t.Context(), app.GetOrder{ID: "ord-3"}); err != nil {
		t.Fatalf("the order before the bad line: %v", err)
	}
	for _, st := range k.Status().Operations {
		if st.ID == "orders.import" && st.MaxStreams != 4 {
			t.Fatalf("orders.import: MaxStreams %d, want shop.json's 4", st.MaxStreams)
		}
	}
}
