package grpcadapter

import (
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/metric"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
)

// The recommended bounds of a gRPC listener, which ServerOptions applies.
// grpc-go's own defaults are in parentheses.
const (
	// defaultMaxConcurrentStreams is the most streams (calls) one client
	// connection may have open at once (unlimited). A client past it is
	// told by the HTTP/2 SETTINGS to wait: grpc-go's client queues the
	// excess calls; a client that opens them anyway gets RST_STREAM
	// REFUSED_STREAM. It bounds what stalled calls can hold per
	// connection, and a rapid-reset flood to that many handlers at once.
	defaultMaxConcurrentStreams = 256
	// defaultMaxHeaderListSize is the largest header list (metadata) of a
	// call, in bytes, as HPACK counts it (16 MiB): the HTTP server's
	// MaxHeaderBytes. A larger one is refused (the client fails the call
	// before sending; a raw client gets RST_STREAM), and the server does
	// not keep what it read past the limit. It holds rpccall.DefaultBaggageLimit.
	defaultMaxHeaderListSize = 64 << 10
	// defaultMaxRecvMsgSize is the largest request message, in bytes
	// (4 MiB): the HTTP adapter's default body limit (1 MiB), so that a
	// request has the same bound over HTTP and gRPC. A larger one is
	// answered ResourceExhausted.
	defaultMaxRecvMsgSize = 1 << 20
	// defaultConnectionTimeout bounds the connection's set-up, HTTP/2
	// preface and SETTINGS included (120s): the HTTP server's
	// ReadHeaderTimeout.
	defaultConnectionTimeout = 5 * time.Second
	// defaultKeepaliveMinTime is the shortest interval at which a client
	// may ping (5m); a client pinging more often is sent GOAWAY
	// ENHANCE_YOUR_CALM and disconnected. 10s is the shortest keepalive
	// grpc-go's client allows, so any client grpc-go lets configure passes.
	// Pings without an open call are not permitted (as grpc-go's default).
	defaultKeepaliveMinTime = 10 * time.Second
	// defaultMaxConnectionIdle closes a connection that has had no call for
	// this long with a GOAWAY (infinite): the HTTP server's IdleTimeout.
	defaultMaxConnectionIdle = 2 * time.Minute
	// defaultMaxConnectionAge sends a connection GOAWAY after this long,
	// give or take 10% (infinite). So clients rebalance, and no connection
	// holds resources for ever. The calls in flight then have
	// defaultMaxConnectionAgeGrace (infinite) to finish before the
	// connection is closed.
	defaultMaxConnectionAge      = 30 * time.Minute
	defaultMaxConnectionAgeGrace = 30 * time.Second
	// defaultKeepaliveTime is how long a connection may be silent before
	// the server pings it (grpc-go's default: 2h). defaultKeepaliveTimeout
	// is how long the server waits for the ack before closing it (grpc-go's
	// default: 20s). So a client that
	// vanished without closing is gone within 80s, with every call it held.
	defaultKeepaliveTime    = time.Minute
	defaultKeepaliveTimeout = 20 * time.Second
	// defaultRecvTimeout is WithRecvTimeout's default: the time the
	// request message of an adapter method may take to arrive once its
	// headers have. It is the HTTP server's ReadHeaderTimeout.
	defaultRecvTimeout = 5 * time.Second
	// defaultResetBurst and defaultResetRate bound the streams one
	// connection may reset before the server answered them (none): 256
	// at once, and 256 a second on average. A client may cancel every
	// call it may hold at once (MaxConcurrentStreams). Each reset stream
	// costs the server a goroutine and its wake-ups, all at once on a
	// single core; 256 of them cost a quarter of what 1024 did. A
	// rapid-reset client crosses the bound within a few milliseconds.
	defaultResetBurst = defaultMaxConcurrentStreams
	defaultResetRate  = 256
	// defaultMaxConnections bounds the connections open at once
	// (unlimited), and with MaxConcurrentStreams the calls of the listener:
	// a connection past it is closed as it is accepted.
	defaultMaxConnections = 1024
)

// Bounds are the resource bounds of a gRPC listener that ServerOptions
// turns into grpc.ServerOptions. DefaultBounds returns the recommended
// ones; a zero field leaves grpc-go's default for it.
type Bounds struct {
	MaxConcurrentStreams uint32        // grpc.MaxConcurrentStreams
	MaxHeaderListSize    uint32        // grpc.MaxHeaderListSize
	MaxRecvMsgSize       int           // grpc.MaxRecvMsgSize
	ConnectionTimeout    time.Duration // grpc.ConnectionTimeout
	// Keepalive and Enforcement are given to grpc.KeepaliveParams and
	// grpc.KeepaliveEnforcementPolicy as they are (a zero struct: grpc-go's
	// defaults).
	Keepalive   keepalive.ServerParameters
	Enforcement keepalive.EnforcementPolicy

	// ResetBurst and ResetRate bound the streams one connection may reset
	// (RST_STREAM) before the server ended them: ResetBurst at once and
	// ResetRate a second on average. A connection past them is sent
	// GOAWAY ENHANCE_YOUR_CALM and closed. ResetBurst 0: no bound.
	ResetBurst int
	ResetRate  float64
	// MaxConnections bounds the connections open at once; one past it is
	// closed as it is accepted. 0: no bound.
	MaxConnections int
	// Logger gets a warning per connection the guard closes, sampled as
	// logs.Sampler does; nil logs nothing. MeterProvider gets the guard's counters; nil is otel's
	// global provider.
	Logger        *slog.Logger
	MeterProvider metric.MeterProvider
	// Creds are the server's transport credentials (TLS, say), which the
	// guard wraps; nil is insecure. ServerOptions installs them with
	// grpc.Creds, so a server with TLS sets them here: a grpc.Creds of its
	// own given to grpc.NewServer would replace the guard, or be replaced
	// by it when given before ServerOptions.
	Creds credentials.TransportCredentials
}

// DefaultBounds returns the recommended bounds, which ServerOptions lists.
func DefaultBounds() Bounds {
	return Bounds{
		MaxConcurrentStreams: defaultMaxConcurrentStreams,
		MaxHeaderListSize:    defaultMaxHeaderListSize,
		MaxRecvMsgSize:       defaultMaxRecvMsgSize,
		ConnectionTimeout:    defaultConnectionTimeout,
		Keepalive: keepalive.ServerParameters{
			MaxConnectionIdle:     defaultMaxConnectionIdle,
			MaxConnectionAge:      defaultMaxConnectionAge,
			MaxConnectionAgeGrace: defaultMaxConnectionAgeGrace,
			Time:                  defaultKeepaliveTime,
			Timeout:               defaultKeepaliveTimeout,
		},
		ResetBurst:     defaultResetBurst,
		ResetRate:      defaultResetRate,
		MaxConnections: defaultMaxConnections,
		Enforcement: keepalive.EnforcementPolicy{
			MinTime:             defaultKeepaliveMinTime,
			PermitWithoutStream: false,
		},
	}
}

// ServerOptions returns b as server options; a zero field gives none (and
// grpc-go's default stands). Pass the recommended bounds to grpc.NewServer
// with the application's own:
//
//	srv := grpc.NewServer(append(grpcadapter.DefaultBounds().ServerOptions(),
//		grpc.UnknownServiceHandler(a.UnknownServiceHandler))...)
//
// With DefaultBounds, one connection holds at most 256 calls. A call's
// metadata is at most 64 KiB and its request message at most 1 MiB. An
// adapter method's request message must arrive within WithRecvTimeout (5s)
// of its headers; that bound is the adapter's own, an Option of New. An
// idle connection is closed after 2 minutes, and a silent one after 80
// seconds. Every connection is recycled after 30 minutes. A later option
// given to grpc.NewServer replaces the one returned here. The options
// include grpc.Creds, the connection guard, insecure. A server with TLS
// sets Bounds.Creds rather than passing grpc.Creds itself.
func (b Bounds) ServerOptions() []grpc.ServerOption {
	var out []grpc.ServerOption
	if b.MaxConcurrentStreams > 0 {
		out = append(out, grpc.MaxConcurrentStreams(b.MaxConcurrentStreams))
	}
	if b.MaxHeaderListSize > 0 {
		out = append(out, grpc.MaxHeaderListSize(b.MaxHeaderListSize))
	}
	if b.MaxRecvMsgSize > 0 {
		out = append(out, grpc.MaxRecvMsgSize(b.MaxRecvMsgSize))
	}
	if b.ConnectionTimeout > 0 {
		out = append(out, grpc.ConnectionTimeout(b.ConnectionTimeout))
	}
	if b.Keepalive != (keepalive.ServerParameters{}) {
		out = append(out, grpc.KeepaliveParams(b.Keepalive))
	}
	if b.Enforcement != (keepalive.EnforcementPolicy{}) {
		out = append(out, grpc.KeepaliveEnforcementPolicy(b.Enforcement))
	}
	if b.guarded() {
		out = append(out, grpc.Creds(b.credentials(b.Creds)))
	} else if b.Creds != nil {
		out = append(out, grpc.Creds(b.Creds))
	}
	return out
}

// guarded reports whether b has a bound the connection guard enforces.
func (b Bounds) guarded() bool { return b.ResetBurst > 0 || b.MaxConnections > 0 }

// credentials returns transport credentials that enforce b's connection
// bounds (ResetBurst, ResetRate, MaxConnections, and the bound on calls
// whose request message is late; see WithRecvTimeout) around creds.
// ServerOptions calls it with b.Creds. A nil creds is
// insecure.NewCredentials().
func (b Bounds) credentials(creds credentials.TransportCredentials) credentials.TransportCredentials {
	return newGuard(b, creds)
}
