// Package pipenet is an in-memory network for tests: a net.Listener whose
// connections are net.Pipe pairs. Reads and writes on them block durably,
// so a server on it runs inside a testing/synctest bubble, where its
// timers (read deadlines, timeouts) keep the bubble's fake time.
package pipenet

import (
	"context"
	"net"
	"sync"
)

// Listener is a net.Listener over net.Pipe. Its zero value is not usable;
// call Listen.
type Listener struct {
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

// Listen returns a new Listener.
func Listen() *Listener {
	return &Listener{conns: make(chan net.Conn), closed: make(chan struct{})}
}

// Dial connects to l and returns the client's end of the connection. It
// waits for l to accept it, and fails with net.ErrClosed once l is closed.
func (l *Listener) Dial() (net.Conn, error) { return l.DialContext(context.Background()) }

// DialContext is Dial, and fails with ctx's error when ctx ends first.
// Its signature is http.Transport's DialContext's, without the network
// and address, which it ignores.
func (l *Listener) DialContext(ctx context.Context) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-l.closed:
		client.Close()
		server.Close()
		return nil, net.ErrClosed
	case <-ctx.Done():
		client.Close()
		server.Close()
		return nil, ctx.Err()
	}
}

// Accept waits for the next connection.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

// Close stops l: Accept and Dial fail with net.ErrClosed. Connections
// already made stay open.
func (l *Listener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

// Addr returns the listener's address, "pipe".
func (l *Listener) Addr() net.Addr { return addr{} }

type addr struct{}

func (addr) Network() string { return "pipe" }
func (addr) String() string  { return "pipe" }
