package kernel_test

import (
	"context"
	"io"
	"testing"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
)

// discardRaw is a transport stream that takes every message at once and
// sends none.
type discardRaw struct{}

func (discardRaw) Send(any) error          { return nil }
func (discardRaw) Recv() (any, int, error) { return nil, 0, io.EOF }
func (discardRaw) Abort(error)             {}

func benchKernel(b *testing.B, n int) *kernel.Op {
	reg := operations.NewRegistry()
	if err := operations.RegisterServerStream(reg, operations.Descriptor{ID: "bench.watch"},
		func(_ context.Context, _ Watch, out *operations.Sender[*Event]) error {
			ev := &Event{}
			for range n {
				if err := out.Send(ev); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
		b.Fatal(err)
	}
	k, err := kernel.New(kernel.WithRegistry(reg), kernel.WithConfigJSON([]byte(wrap(
		`{"Operations":{"bench.watch":{"Stream":{"MaxStreams":100,"IdleSeconds":10,"SendStallSeconds":10}}}}`))))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { k.Close() })
	return k.Op("bench.watch")
}

// BenchmarkStreamOpen opens and ends one server stream that sends
// nothing: admission, the pool's slot, the stream's clocks, the outcome.
func BenchmarkStreamOpen(b *testing.B) {
	op := benchKernel(b, 0)
	in := &Watch{}
	b.ReportAllocs()
	for b.Loop() {
		if out := op.Stream(context.Background(), kernel.StreamCall{Input: in, Raw: discardRaw{}}); out.Err != nil {
			b.Fatal(out.Err)
		}
	}
}

// BenchmarkStreamSend is the cost of one message through Op.Stream, with
// the idle and send-stall clocks set: 1,000 messages a stream.
func BenchmarkStreamSend(b *testing.B) {
	const n = 1000
	op := benchKernel(b, n)
	in := &Watch{}
	b.ReportAllocs()
	for b.Loop() {
		if out := op.Stream(context.Background(), kernel.StreamCall{Input: in, Raw: discardRaw{}}); out.Err != nil {
			b.Fatal(out.Err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/msg")
}
