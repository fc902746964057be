package cliadapter

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience/stream"
)

// These tests run the command line's stream.Raw under stream.Open
// directly, as the kernel does.

type lineNum struct {
	N int `json:"n"`
}

func decodeLineNum(b []byte) (any, error) {
	var n lineNum
	if err := decodeJSON(b, &n, false); err != nil {
		return nil, err
	}
	return &n, nil
}

// TestLineStreamLines: each message is one JSON line on stdout; each
// line of stdin one message, io.EOF at its end; a line that does not
// decode ends the stream with VALIDATION.
func TestLineStreamLines(t *testing.T) {
	var out bytes.Buffer
	ls := newLineStream(context.Background(), &out, strings.NewReader("{\"n\":1}\n\n{\"n\":2}\n"), decodeLineNum)
	defer ls.close()
	s := stream.Open(context.Background(), ls, stream.Config{})
	total := 0
	for {
		m, err := s.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		total += m.(*lineNum).N
		if err := s.Send(lineNum{total}); err != nil {
			t.Fatal(err)
		}
	}
	if r := s.Close(nil); r.Received != 2 || r.Sent != 2 || out.String() != "{\"n\":1}\n{\"n\":3}\n" {
		t.Fatalf("result %+v, stdout %q", r, out.String())
	}

	bad := newLineStream(context.Background(), io.Discard, strings.NewReader("{\"n\":1}\n{\"m\":1}\n"), decodeLineNum)
	defer bad.close()
	s = stream.Open(context.Background(), bad, stream.Config{Kind: stream.Client})
	var err error
	for err == nil {
		_, err = s.Recv()
	}
	if r := s.Close(err); r.Reason != stream.EndLimit || pipeline.AsError(r.Err).Kind() != pipeline.KindValidation {
		t.Fatalf("result %v %v, want limit VALIDATION", r.Reason, r.Err)
	}
}

// TestLineStreamEnds: a stdout nobody reads ends the stream at the send
// stall, KERNEL_CANCELLED_002, and a stdin that never ends returns when
// the caller's signal cancels the call: CANCELLED 001.
func TestLineStreamEnds(t *testing.T) {
	pr, pw := io.Pipe()
	defer pr.Close()
	ls := newLineStream(context.Background(), pw, strings.NewReader(""), decodeLineNum)
	defer ls.close()
	s := stream.Open(context.Background(), ls, stream.Config{Kind: stream.Server, SendStall: 100 * time.Millisecond})
	err := s.Send(lineNum{1})
	if r := s.Close(err); r.Reason != stream.EndSlowConsumer || pipeline.AsError(r.Err).Code() != stream.CodeSendStall {
		t.Fatalf("result %v %v, want slow_consumer", r.Reason, r.Err)
	}

	ir, iw := io.Pipe()
	defer iw.Close()
	ctx, cancel := context.WithCancel(context.Background())
	ls = newLineStream(ctx, io.Discard, ir, decodeLineNum)
	defer ls.close()
	s = stream.Open(ctx, ls, stream.Config{Kind: stream.Client})
	go func() {
		_ = json.NewEncoder(iw).Encode(lineNum{1})
		cancel() // the signal, after the first line
	}()
	for err = nil; err == nil; _, err = s.Recv() {
	}
	if r := s.Close(err); r.Reason != stream.EndCallerLeft || pipeline.AsError(r.Err).Code() != pipeline.CodeCanceled {
		t.Fatalf("result %v %v, want caller_left", r.Reason, r.Err)
	}
}
