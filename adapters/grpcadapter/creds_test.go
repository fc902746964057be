package grpcadapter_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"math/big"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sundial-go/sundial/adapters/grpcadapter"
)

// TestBoundsCredsKeepTLS: a server whose Bounds carry TLS credentials
// serves TLS through ServerOptions, with the connection guard or
// without: a TLS client is answered, a plaintext one is not.
func TestBoundsCredsKeepTLS(t *testing.T) {
	serverTLS, pool := selfSigned(t)
	for _, tc := range []struct {
		name   string
		bounds grpcadapter.Bounds
	}{
		{"guarded", grpcadapter.DefaultBounds()},
		{"unguarded", grpcadapter.Bounds{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.bounds
			b.Creds = credentials.NewTLS(serverTLS)
			srv := grpc.NewServer(b.ServerOptions()...)
			healthpb.RegisterHealthServer(srv, health.NewServer())
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			go func() { _ = srv.Serve(lis) }()
			defer srv.Stop()

			check := func(creds credentials.TransportCredentials) error {
				conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(creds))
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
				defer cancel()
				_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
				return err
			}
			if err := check(credentials.NewTLS(&tls.Config{RootCAs: pool, ServerName: "127.0.0.1"})); err != nil {
				t.Fatalf("a TLS client: %v, want an answer", err)
			}
			if err := check(insecure.NewCredentials()); err == nil {
				t.Fatal("a plaintext client was answered: the server dropped its TLS")
			}
		})
	}
}

// selfSigned returns a server TLS config for 127.0.0.1 and the pool that
// trusts it.
func selfSigned(t *testing.T) (*tls.Config, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}, pool
}
