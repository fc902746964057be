// Command conformance serves the Connect conformance suite's
// ConformanceService as Sundial operations, for the suite's runner
// (connectconformance) in server mode.
//
// The runner writes a ServerCompatRequest to standard input, as a 4-byte
// big-endian length and the message. The program listens on an ephemeral
// port of 127.0.0.1, over HTTP/1.1 and h2c, and writes a
// ServerCompatResponse with the host and port to standard output in the
// same form. It serves until it is sent SIGTERM or SIGINT. `make
// conformance` runs the suite against it; docs/connect.md lists what it
// claims.
package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/sundial-go/sundial/adapters/connectadapter"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "conformance:", err)
		os.Exit(1)
	}
}

// run reads the runner's request from in, serves, writes the response to
// out and serves until ctx ends.
func run(ctx context.Context, in io.Reader, out io.Writer) error {
	req, err := readRequest(in)
	if err != nil {
		return err
	}
	if req.useTLS {
		return errors.New("TLS is not claimed: configure the runner without it")
	}
	srv, err := newServer(req.receiveLimit)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	if err := writeResponse(out, ln.Addr().(*net.TCPAddr)); err != nil {
		_ = srv.Close()
		return err
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(shut)
}

// newServer returns the HTTP server of the ConformanceService: Connect,
// gRPC and gRPC-Web over HTTP/1.1 and h2c. limit > 0 bounds a request
// message.
func newServer(limit int) (*http.Server, error) {
	reg := operations.NewRegistry()
	if err := register(reg); err != nil {
		return nil, err
	}
	quiet := slog.New(slog.DiscardHandler)
	k, err := kernel.New(kernel.WithRegistry(reg), kernel.WithLogger(quiet))
	if err != nil {
		return nil, err
	}
	h, err := connectadapter.New(k, connectadapter.WithReadLimit(limit), connectadapter.WithLogger(quiet))
	if err != nil {
		return nil, err
	}
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	return &http.Server{Handler: h, Protocols: p, ReadHeaderTimeout: 5 * time.Second}, nil
}

// compatRequest is what the program reads of a ServerCompatRequest.
type compatRequest struct {
	useTLS       bool // field 4
	receiveLimit int  // field 6, message_receive_limit
}

// maxRequest bounds the runner's request message.
const maxRequest = 1 << 20

// readRequest reads one size-delimited ServerCompatRequest.
func readRequest(r io.Reader) (compatRequest, error) {
	var req compatRequest
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return req, fmt.Errorf("read the request's size: %w", err)
	}
	size := binary.BigEndian.Uint32(n[:])
	if size > maxRequest {
		return req, fmt.Errorf("request of %d bytes, over %d", size, maxRequest)
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(r, b); err != nil {
		return req, fmt.Errorf("read the request: %w", err)
	}
	for len(b) > 0 {
		num, typ, m := protowire.ConsumeTag(b)
		if m < 0 {
			return req, protowire.ParseError(m)
		}
		b = b[m:]
		if typ == protowire.VarintType && (num == 4 || num == 6) {
			v, m := protowire.ConsumeVarint(b)
			if m < 0 {
				return req, protowire.ParseError(m)
			}
			if num == 4 {
				req.useTLS = v != 0
			} else {
				req.receiveLimit = int(min(v, 1<<31-1))
			}
			b = b[m:]
			continue
		}
		m = protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return req, protowire.ParseError(m)
		}
		b = b[m:]
	}
	return req, nil
}

// writeResponse writes one size-delimited ServerCompatResponse naming
// addr.
func writeResponse(w io.Writer, addr *net.TCPAddr) error {
	var msg []byte
	msg = protowire.AppendTag(msg, 1, protowire.BytesType)
	msg = protowire.AppendString(msg, addr.IP.String())
	msg = protowire.AppendTag(msg, 2, protowire.VarintType)
	msg = protowire.AppendVarint(msg, uint64(addr.Port))
	out := binary.BigEndian.AppendUint32(nil, uint32(len(msg)))
	_, err := w.Write(append(out, msg...))
	return err
}
