package pipenet_test

import (
	"context"
	"errors"
	"io"
	"syscall"
	"testing"

	"github.com/sundial-go/sundial/samples/internal/pipenet"
)

// TestNetworkDialsByAddress dials two listeners of one Network by their
// addresses, and is refused an address no listener has or one taken
// twice.
func TestNetworkDialsByAddress(t *testing.T) {
	var n pipenet.Network
	for _, a := range []string{"orders:80", "billing:80"} {
		l, err := n.Listen(a)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		if got := l.Addr().String(); got != a {
			t.Errorf("Addr() = %q, want %q", got, a)
		}
		go func() {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			_, _ = io.WriteString(c, a)
		}()
		c, err := n.DialContext(context.Background(), "tcp", a)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(c)
		c.Close()
		if err != nil || string(b) != a {
			t.Errorf("dial %s read %q (%v), want %q", a, b, err, a)
		}
	}
	if _, err := n.Listen("orders:80"); !errors.Is(err, syscall.EADDRINUSE) {
		t.Errorf("Listen of a taken address = %v, want EADDRINUSE", err)
	}
	if _, err := n.DialContext(context.Background(), "tcp", "inventory:80"); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("dial of an address no listener has = %v, want ECONNREFUSED", err)
	}
}
