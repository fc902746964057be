package grpcadapter

import (
	"context"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
	rstream "github.com/sundial-go/sundial/resilience/stream"
)

// interimConfig is the stream configuration until the kernel runs
// streams (kernel.Op.Stream); tests set it.
var interimConfig rstream.Config

// runStream runs one streaming call: interim, until kernel.Op.Stream.
func (m *method) runStream(parent context.Context, c streamCall) kernel.Outcome {
	u := kernel.Unary{Caller: c.Caller, Decode: c.Decode, Handler: func(ctx context.Context, inv *pipeline.Invocation) (any, error) {
		cfg := interimConfig
		cfg.Kind = map[operations.Kind]rstream.Kind{operations.ServerStream: rstream.Server,
			operations.ClientStream: rstream.Client, operations.BidiStream: rstream.Bidi}[m.desc.Kind()]
		if d, ok := inv.Deadline(); ok {
			cfg.Deadline, cfg.DeadlineSource = d, inv.Timing().Source
		}
		s := rstream.Open(ctx, c.Raw, cfg)
		out, err := m.desc.StreamHandler()(s.Context(), inv, s)
		r := s.Close(err)
		if r.Reason != rstream.EndCompleted || r.Err != nil {
			return nil, r.Err
		}
		return out, nil
	}}
	return m.op.Invoke(parent, u)
}
