package cliadapter

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"sync"

	"github.com/sundial-go/sundial/adapters/internal/ndjson"
	"github.com/sundial-go/sundial/kernel"
)

// This file carries a stream over the command's standard streams: one
// JSON line a message, on stdout for the operation's messages and on
// stdin for the caller's.

// errStreamEnded is what Send and Recv return once the stream has ended.
var errStreamEnded = errors.New("cliadapter: the stream has ended")

// stdinLine is one line read from stdin, or the read's error.
type stdinLine struct {
	line []byte
	err  error
}

// lineStream is a stream over stdout and stdin: the transport's
// stream.Raw. A write or a read that blocks runs on a goroutine of its
// own, so that the end of the stream, or the caller's signal, returns
// at once. The process ends soon after, with the blocked goroutine.
type lineStream struct {
	ctx     context.Context // the caller's: a signal ends it
	out     io.Writer
	stdin   io.Reader
	decode  func([]byte) (any, error)
	aborted chan struct{}
	abort   sync.Once

	readOnce sync.Once
	lines    chan stdinLine
	closing  chan struct{} // closed by close: the reader returns
}

func newLineStream(ctx context.Context, out io.Writer, stdin io.Reader, decode func([]byte) (any, error)) *lineStream {
	return &lineStream{ctx: ctx, out: out, stdin: stdin, decode: decode,
		aborted: make(chan struct{}), lines: make(chan stdinLine), closing: make(chan struct{})}
}

// Send writes one message as a JSON line, flushed when out can flush.
func (s *lineStream) Send(m any) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	done := make(chan error, 1) // buffered: the writer never waits for us
	go func() {
		_, err := s.out.Write(b)
		if f, ok := s.out.(interface{ Flush() error }); ok && err == nil {
			err = f.Flush()
		}
		done <- err
	}()
	return s.wait(done)
}

// wait waits for done, the end of the stream or the caller's signal.
func (s *lineStream) wait(done <-chan error) error {
	select {
	case err := <-done:
		return err
	case <-s.aborted:
		return errStreamEnded
	case <-s.ctx.Done():
		return context.Cause(s.ctx)
	}
}

// read reads stdin's lines until its end, an error or close.
func (s *lineStream) read() {
	r := ndjson.NewReader(s.stdin, maxInputBytes)
	for {
		line, err := r.Next()
		if err == nil {
			line = append([]byte(nil), line...)
		} else if errors.Is(err, ndjson.ErrTooLong) {
			err = inputFailure(&inputError{Msg: "a line of standard input is larger than 16 MiB"})
		}
		select {
		case s.lines <- stdinLine{line, err}:
		case <-s.closing:
			return
		}
		if err != nil {
			return
		}
	}
}

// Recv reads one line of stdin and decodes it. It returns io.EOF at the
// end of stdin.
func (s *lineStream) Recv() (any, int, error) {
	s.readOnce.Do(func() { go s.read() })
	select {
	case l := <-s.lines:
		if l.err != nil {
			return nil, 0, l.err
		}
		in, err := s.decode(l.line)
		if err != nil {
			return nil, len(l.line), inputFailure(err)
		}
		return in, len(l.line), nil
	case <-s.aborted:
		return nil, 0, errStreamEnded
	case <-s.ctx.Done():
		return nil, 0, context.Cause(s.ctx)
	}
}

// Abort makes blocked and later Send and Recv calls return.
func (s *lineStream) Abort(error) { s.abort.Do(func() { close(s.aborted) }) }

// close stops the reader of stdin once it has read its line.
func (s *lineStream) close() { close(s.closing) }

// stream runs the operation's stream, with u's caller and request. A
// server stream's request comes from the flags and --input, as for a
// unary call. The caller's messages are standard input's lines, each
// decoded as --input is, the flags given overriding its fields.
func (r *runner) stream(ctx context.Context, u kernel.Unary, fields *inputFlags) kernel.Outcome {
	flags := r.cmd.Flags()
	ls := newLineStream(ctx, r.cmd.OutOrStdout(), r.cmd.InOrStdin(),
		func(b []byte) (any, error) { return fields.decode(flags, b) })
	defer ls.close()
	return r.op.Stream(ctx, kernel.StreamCall{Caller: u.Caller, Input: u.Input, Decode: u.Decode, Raw: ls})
}
