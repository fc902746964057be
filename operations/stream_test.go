package operations_test

import (
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
)

type tick struct{ N int }

type total struct{ Sum int }

// chanStream is an operations.Stream over a slice of inputs; what is sent
// is kept.
type chanStream struct {
	in   []any
	sent []any
}

func (s *chanStream) Send(m any) error { s.sent = append(s.sent, m); return nil }

func (s *chanStream) Recv() (any, error) {
	if len(s.in) == 0 {
		return nil, io.EOF
	}
	m := s.in[0]
	s.in = s.in[1:]
	return m, nil
}

func streamRegistry(t *testing.T) *operations.Registry {
	t.Helper()
	reg := operations.NewRegistry()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(operations.Register(reg, operations.Descriptor{ID: "ticks.one"},
		func(_ context.Context, in tick) (tick, error) { return in, nil }))
	must(operations.RegisterServerStream(reg, operations.Descriptor{ID: "ticks.watch", Method: "GET", Path: "/ticks"},
		func(_ context.Context, in tick, out *operations.Sender[tick]) error {
			for i := range in.N {
				if err := out.Send(tick{i}); err != nil {
					return err
				}
			}
			return nil
		}))
	must(operations.RegisterClientStream(reg, operations.Descriptor{ID: "ticks.sum"},
		func(_ context.Context, in *operations.Receiver[tick]) (total, error) {
			var sum total
			for {
				m, err := in.Recv()
				if err == io.EOF {
					return sum, nil
				}
				if err != nil {
					return total{}, err
				}
				sum.Sum += m.N
			}
		}))
	must(operations.RegisterBidiStream(reg, operations.Descriptor{ID: "ticks.echo"},
		func(_ context.Context, in *operations.Receiver[tick], out *operations.Sender[tick]) error {
			for {
				m, err := in.Recv()
				if err == io.EOF {
					return nil
				}
				if err != nil {
					return err
				}
				if err := out.Send(tick{m.N * 2}); err != nil {
					return err
				}
			}
		}))
	return reg
}

func invocation(d *operations.Descriptor, in any) *pipeline.Invocation {
	return pipeline.NewInvocation(pipeline.Spec{Operation: d, Input: in})
}

// TestStreamKinds: each registration gives its kind and the same Go types;
// unary descriptors keep the zero kind and no stream handler, so adapters
// that serve unary calls can skip the others.
func TestStreamKinds(t *testing.T) {
	reg := streamRegistry(t)
	want := map[string]operations.Kind{"ticks.one": operations.Unary, "ticks.watch": operations.ServerStream,
		"ticks.sum": operations.ClientStream, "ticks.echo": operations.BidiStream}
	var unary []string
	for _, d := range reg.All() {
		if d.Kind() != want[d.ID] {
			t.Errorf("%s: Kind() = %v, want %v", d.ID, d.Kind(), want[d.ID])
		}
		if (d.StreamHandler() == nil) != (d.Kind() == operations.Unary) {
			t.Errorf("%s: a %v with stream handler %v", d.ID, d.Kind(), d.StreamHandler() != nil)
		}
		if d.Input.Name() != "tick" {
			t.Errorf("%s: input %v, want tick", d.ID, d.Input)
		}
		if d.Kind() == operations.Unary {
			unary = append(unary, d.ID)
		}
	}
	if !slices.Equal(unary, []string{"ticks.one"}) {
		t.Fatalf("unary operations %v, want [ticks.one]", unary)
	}
	if d, _ := reg.Lookup("ticks.sum"); d.Output.Name() != "total" {
		t.Fatalf("ticks.sum output %v, want total", d.Output)
	}
	names := []string{operations.Unary.String(), operations.ServerStream.String(),
		operations.ClientStream.String(), operations.BidiStream.String(), operations.Kind(9).String()}
	if !slices.Equal(names, []string{"unary", "server-stream", "client-stream", "bidi-stream", "unknown"}) {
		t.Fatalf("kind names %v", names)
	}
}

// TestStreamHandlers runs each kind's handler over an untyped stream, as
// the kernel will: inputs arrive as In or *In.
func TestStreamHandlers(t *testing.T) {
	reg := streamRegistry(t)
	ctx := context.Background()
	run := func(id string, input any, in ...any) (any, []any, error) {
		d, _ := reg.Lookup(id)
		s := &chanStream{in: in}
		out, err := d.StreamHandler()(ctx, invocation(d, input), s)
		return out, s.sent, err
	}
	if out, sent, err := run("ticks.watch", &tick{3}); err != nil || out != nil ||
		!slices.Equal(sent, []any{tick{0}, tick{1}, tick{2}}) {
		t.Fatalf("ticks.watch = %v, %v, %v", out, sent, err)
	}
	if out, _, err := run("ticks.sum", nil, tick{1}, &tick{2}, (*tick)(nil), tick{4}); err != nil || out != (total{7}) {
		t.Fatalf("ticks.sum = %v, %v, want {7}", out, err)
	}
	if _, sent, err := run("ticks.echo", nil, tick{1}, &tick{5}); err != nil || !slices.Equal(sent, []any{tick{2}, tick{10}}) {
		t.Fatalf("ticks.echo sent %v, %v", sent, err)
	}
	// An input of another type is UNEXPECTED, naming the operation.
	_, _, err := run("ticks.sum", nil, "nope")
	if pipelinetest.KindOf(err) != pipeline.KindUnexpected || !strings.Contains(pipeline.AsError(err).Message(), `"ticks.sum"`) {
		t.Fatalf("a string input: %v, want UNEXPECTED naming ticks.sum", err)
	}
	if _, _, err := run("ticks.watch", 7); pipelinetest.KindOf(err) != pipeline.KindUnexpected {
		t.Fatalf("a request of another type: %v, want UNEXPECTED", err)
	}
	// A Send error ends the handler with it.
	d, _ := reg.Lookup("ticks.echo")
	boom := errors.New("transport gone")
	if _, err := d.StreamHandler()(ctx, invocation(d, nil), failingStream{boom}); !errors.Is(err, boom) {
		t.Fatalf("echo over a failing stream: %v, want %v", err, boom)
	}
}

type failingStream struct{ err error }

func (f failingStream) Send(any) error     { return f.err }
func (f failingStream) Recv() (any, error) { return tick{1}, nil }

// TestStreamTakesNoUnaryCall: a streaming operation's unary handler
// refuses the call instead of running the handler with a nil stream.
func TestStreamTakesNoUnaryCall(t *testing.T) {
	reg := streamRegistry(t)
	for _, id := range []string{"ticks.watch", "ticks.sum", "ticks.echo"} {
		d, _ := reg.Lookup(id)
		_, err := d.Handler()(context.Background(), invocation(d, &tick{1}))
		if pipelinetest.KindOf(err) != pipeline.KindUnexpected || !strings.Contains(err.Error(), "takes no unary call") {
			t.Errorf("%s called as unary: %v", id, err)
		}
	}
}

// TestRegisterStreamChecks: the stream registrations check the descriptor
// as Register does.
func TestRegisterStreamChecks(t *testing.T) {
	reg := streamRegistry(t)
	noop := func(context.Context, tick, *operations.Sender[tick]) error { return nil }
	for _, tt := range []struct {
		name string
		err  error
		want string
	}{
		{"duplicate", operations.RegisterServerStream(reg, operations.Descriptor{ID: "ticks.one"}, noop), `"ticks.one" is already registered`},
		{"bad ID", operations.RegisterServerStream(reg, operations.Descriptor{ID: "Ticks"}, noop), "Ticks"},
		{"nil registry", operations.RegisterServerStream(nil, operations.Descriptor{ID: "a.b"}, noop), "nil registry"},
		{"nil server", operations.RegisterServerStream[tick, tick](reg, operations.Descriptor{ID: "a.b"}, nil), "nil handler"},
		{"nil client", operations.RegisterClientStream[tick, tick](reg, operations.Descriptor{ID: "a.b"}, nil), "nil handler"},
		{"nil bidi", operations.RegisterBidiStream[tick, tick](reg, operations.Descriptor{ID: "a.b"}, nil), "nil handler"},
		{"path alone", operations.RegisterServerStream(reg, operations.Descriptor{ID: "a.b", Path: "/x"}, noop), "Method and Path"},
	} {
		if tt.err == nil || !strings.Contains(tt.err.Error(), tt.want) {
			t.Errorf("%s: %v, want an error containing %q", tt.name, tt.err, tt.want)
		}
	}
	if _, ok := reg.Lookup("a.b"); ok {
		t.Fatal("a refused registration was added")
	}
}
