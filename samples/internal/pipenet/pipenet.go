// Package pipenet is an in-memory network for tests: a net.Listener whose
// connections are net.Pipe pairs. Reads and writes on them block durably,
// so a server on it runs inside a testing/synctest bubble, where its
// timers (read deadlines, timeouts) keep the bubble's fake time.
package pipenet

import (
	"context"
	"fmt"
	"net"
	"sync"
	"syscall"
)

// Listener is a net.Listener over net.Pipe. Its zero value is not usable;
// call Listen.
type Listener struct {
	addr   addr
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

// Listen returns a new Listener.
func Listen() *Listener {
	return &Listener{addr: "pipe", conns: make(chan net.Conn), closed: make(chan struct{})}
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

// Addr returns the listener's address: "pipe", or its address on a
// Network.
func (l *Listener) Addr() net.Addr { return l.addr }

type addr string

func (addr) Network() string  { return "pipe" }
func (a addr) String() string { return string(a) }

// Network is a set of Listeners, each at an address of its own, that
// DialContext reaches by that address. Its zero value is ready to use.
type Network struct {
	mu sync.Mutex // guards ls
	ls map[string]*Listener
}

// Listen returns a new Listener at address a, such as "orders:80". It
// fails when a Listener of n already has that address.
func (n *Network) Listen(a string) (*Listener, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.ls[a]; ok {
		return nil, fmt.Errorf("pipenet: listen %s: %w", a, syscall.EADDRINUSE)
	}
	if n.ls == nil {
		n.ls = make(map[string]*Listener)
	}
	l := Listen()
	l.addr = addr(a)
	n.ls[a] = l
	return l, nil
}

// DialContext connects to the Listener at address a. A missing address
// is refused (syscall.ECONNREFUSED). Its signature is net.Dialer's;
// network is ignored.
func (n *Network) DialContext(ctx context.Context, network, a string) (net.Conn, error) {
	n.mu.Lock()
	l := n.ls[a]
	n.mu.Unlock()
	if l == nil {
		return nil, &net.OpError{Op: "dial", Net: "pipe", Addr: addr(a), Err: syscall.ECONNREFUSED}
	}
	return l.DialContext(ctx)
}
