package operations

import (
	"context"
	"fmt"

	"github.com/sundial-go/sundial/pipeline"
)

// Kind is how an operation's messages flow.
type Kind uint8

// The kinds of operation.
const (
	// Unary: one input, one output. It is the zero Kind.
	Unary Kind = iota
	// ServerStream: one input, a stream of outputs.
	ServerStream
	// ClientStream: a stream of inputs, one output.
	ClientStream
	// BidiStream: a stream of inputs and a stream of outputs.
	BidiStream
)

var kindNames = [...]string{Unary: "unary", ServerStream: "server-stream",
	ClientStream: "client-stream", BidiStream: "bidi-stream"}

// String returns the kind's name, e.g. "server-stream".
func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "unknown"
}

// Kind returns how the operation's messages flow. Adapters that serve
// only unary calls skip the other kinds.
func (d *Descriptor) Kind() Kind { return d.kind }

// Stream is one open stream as the kernel gives it to a streaming
// handler. Send and Recv block. Recv returns io.EOF after the caller's
// last message. One goroutine may call Send while another calls Recv.
type Stream interface {
	Send(m any) error
	Recv() (any, error)
}

// StreamHandler is the terminal handler of a streaming operation. A
// server stream's request is the invocation's input. It returns a client
// stream's output, and nil for the other kinds.
type StreamHandler func(ctx context.Context, inv *pipeline.Invocation, s Stream) (any, error)

// StreamHandler returns the handler of a streaming operation; nil for a
// unary one.
func (d *Descriptor) StreamHandler() StreamHandler { return d.stream }

// Sender sends a stream's outputs.
type Sender[Out any] struct{ s Stream }

// Send sends one output. An error ends the stream; return it.
func (s *Sender[Out]) Send(m Out) error { return s.s.Send(m) }

// Receiver receives a stream's inputs.
type Receiver[In any] struct {
	s Stream
	d *Descriptor
}

// Recv receives one input. It returns io.EOF after the caller's last.
func (r *Receiver[In]) Recv() (In, error) {
	m, err := r.s.Recv()
	if err != nil {
		var zero In
		return zero, err
	}
	return inputOf[In](r.d.ID, r.d.Input, m)
}

// RegisterServerStream adds an operation that answers one input In with
// a stream of outputs Out. It checks d as [Register] does.
func RegisterServerStream[In, Out any](r *Registry, d Descriptor, fn func(context.Context, In, *Sender[Out]) error) error {
	if err := prepare[In, Out](r, &d, ServerStream, fn == nil); err != nil {
		return err
	}
	return addStream(r, d, func(ctx context.Context, inv *pipeline.Invocation, s Stream) (any, error) {
		in, err := inputOf[In](d.ID, d.Input, inv.Input())
		if err != nil {
			return nil, err
		}
		return nil, statusOutcome(fn(ctx, in, &Sender[Out]{s}))
	})
}

// RegisterClientStream adds an operation that answers a stream of inputs
// In with one output Out. It checks d as [Register] does; the
// constraints of In apply to each input.
func RegisterClientStream[In, Out any](r *Registry, d Descriptor, fn func(context.Context, *Receiver[In]) (Out, error)) error {
	if err := prepare[In, Out](r, &d, ClientStream, fn == nil); err != nil {
		return err
	}
	return addStream(r, d, func(ctx context.Context, _ *pipeline.Invocation, s Stream) (any, error) {
		out, err := fn(ctx, &Receiver[In]{s, &d})
		if err != nil {
			return nil, statusOutcome(err)
		}
		return out, nil
	})
}

// RegisterBidiStream adds an operation that answers a stream of inputs
// In with a stream of outputs Out. It checks d as [Register] does; the
// constraints of In apply to each input.
func RegisterBidiStream[In, Out any](r *Registry, d Descriptor, fn func(context.Context, *Receiver[In], *Sender[Out]) error) error {
	if err := prepare[In, Out](r, &d, BidiStream, fn == nil); err != nil {
		return err
	}
	return addStream(r, d, func(ctx context.Context, _ *pipeline.Invocation, s Stream) (any, error) {
		return nil, statusOutcome(fn(ctx, &Receiver[In]{s, &d}, &Sender[Out]{s}))
	})
}

// addStream adds d with the streaming handler h. Its unary handler
// refuses every call. A unary path that reaches a stream is a wiring bug.
func addStream(r *Registry, d Descriptor, h StreamHandler) error {
	d.stream = h
	msg := fmt.Sprintf("operation %q is a %v; it takes no unary call", d.ID, d.kind)
	d.handler = func(context.Context, *pipeline.Invocation) (any, error) {
		return nil, pipeline.NewError(pipeline.KindUnexpected, pipeline.CodeUnexpected, msg)
	}
	return r.add(d)
}

// Resume returns the caller's resume cursor, such as SSE's Last-Event-ID;
// "" when the caller sent none.
func (s *Sender[Out]) Resume() string {
	if r, ok := s.s.(interface{ Resume() string }); ok {
		return r.Resume()
	}
	return ""
}
