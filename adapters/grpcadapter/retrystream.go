package grpcadapter

import (
	"context"
	"errors"
	"io"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
)

// retryStream is a server stream through a Dependency. Until its first
// response message it holds the caller's request; its first RecvMsg
// runs the attempts, each a stream of its own, until one gets a message.
// That attempt's stream is the caller's from then on, and nothing is
// retried after it.
type retryStream struct {
	ctx    context.Context // the caller's, capped
	cancel context.CancelFunc
	d      Dependency
	open   func(context.Context) (*clientStream, error)

	mu      sync.Mutex
	req     any  // the request, before the attempts
	closed  bool // the caller half-closed before the attempts
	started bool
	cs      *clientStream // the attempt that won
	err     error         // the outcome of the attempts, when none won
	eof     bool          // the winner ended with no message
	ready   chan struct{} // closed once the attempts are over
}

// settled waits for the attempts to be over, when they have started, and
// returns the winner, or the attempts' error. A Header or SendMsg from
// another goroutine during the first RecvMsg waits for it.
func (s *retryStream) settled() (cs *clientStream, err error, eof bool) {
	<-s.ready
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cs, s.err, s.eof
}

func (s *retryStream) SendMsg(m any) error {
	s.mu.Lock()
	if s.started {
		s.mu.Unlock()
		cs, err, _ := s.settled()
		if cs == nil {
			return err
		}
		return cs.SendMsg(m)
	}
	defer s.mu.Unlock()
	s.req = m
	return nil
}

func (s *retryStream) CloseSend() error {
	s.mu.Lock()
	if s.started {
		s.mu.Unlock()
		cs, _, _ := s.settled()
		if cs == nil {
			return nil
		}
		return cs.CloseSend()
	}
	defer s.mu.Unlock()
	s.closed = true
	return nil
}

// RecvMsg runs the attempts on its first call, and receives from the
// winner after.
func (s *retryStream) RecvMsg(m any) error {
	s.mu.Lock()
	if !s.started {
		s.started = true
		s.mu.Unlock()
		return s.start(m, false)
	}
	s.mu.Unlock()
	cs, err, eof := s.settled()
	switch {
	case eof:
		return io.EOF
	case cs == nil:
		return err
	}
	err = cs.RecvMsg(m)
	if err != nil {
		s.cancel() // the stream has ended: release the cap
	}
	return err
}

// Header runs the attempts when it comes before the first RecvMsg: then
// an attempt wins once its headers arrive.
func (s *retryStream) Header() (metadata.MD, error) {
	s.mu.Lock()
	if !s.started {
		s.started = true
		s.mu.Unlock()
		if err := s.start(nil, true); err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
	} else {
		s.mu.Unlock()
	}
	cs, err, _ := s.settled()
	if cs == nil {
		return nil, err
	}
	return cs.Header()
}

func (s *retryStream) Trailer() metadata.MD {
	s.mu.Lock()
	started := s.started
	s.mu.Unlock()
	if !started {
		return nil
	}
	cs, _, _ := s.settled()
	if cs == nil {
		return nil
	}
	return cs.Trailer()
}

func (s *retryStream) Context() context.Context {
	s.mu.Lock()
	cs := s.cs
	s.mu.Unlock()
	if cs == nil {
		return s.ctx
	}
	return cs.Context()
}

// start runs the attempts through the dependency. An attempt opens a
// stream, sends the request and receives the first message into m (a
// fresh message of m's type when m is a proto message, so that hedges
// never share it), or only the headers when header is set. The first
// attempt to succeed wins. Every other attempt's stream ends with it.
func (s *retryStream) start(m any, header bool) error {
	pm, isProto := m.(proto.Message)
	isProto = isProto && pm.ProtoReflect().IsValid()
	err := s.d.Do(s.ctx, func(actx context.Context) error {
		cs, err := s.open(actx)
		if err != nil {
			return err
		}
		r := m
		if isProto {
			r = pm.ProtoReflect().New().Interface()
		}
		eof, err := s.first(cs, r, header)
		if err != nil {
			cs.done() // its stream, context and clocks end with the attempt
			return err
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.cs != nil {
			cs.done() // two hedges both answered: the first stands
			return nil
		}
		s.cs, s.eof = cs, eof
		if isProto && !header && !eof {
			proto.Reset(pm)
			proto.Merge(pm, r.(proto.Message))
		}
		return nil
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	defer close(s.ready)
	if err != nil {
		s.err = err
		s.cancel()
		return err
	}
	if s.eof {
		s.cancel()
		return io.EOF
	}
	return nil
}

// first sends the caller's request on an attempt's stream cs. It
// receives the first message into r, or only the headers when header is
// set. eof reports a stream that ended with OK and no message.
func (s *retryStream) first(cs *clientStream, r any, header bool) (eof bool, err error) {
	if s.req != nil {
		if err := cs.SendMsg(s.req); err != nil && !errors.Is(err, io.EOF) {
			return false, err
		}
	}
	if s.closed {
		if err := cs.CloseSend(); err != nil {
			return false, FromStatus(err)
		}
	}
	var md metadata.MD
	if header {
		md, err = cs.Header()
	}
	if !header || (md == nil && err == nil) {
		// A stream without headers has ended: RecvMsg gives its status.
		if header {
			r = &emptypb.Empty{}
		}
		if err = cs.RecvMsg(r); errors.Is(err, io.EOF) {
			return true, nil // an answer: OK with no message
		}
	}
	if err != nil {
		return false, withPushback(err, cs.Trailer())
	}
	return false, nil
}

var _ grpc.ClientStream = (*retryStream)(nil)
