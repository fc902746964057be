package grpcadapter

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/sundial-go/sundial/adapters/internal/rpccall"
	"github.com/sundial-go/sundial/kernel/client"
	"github.com/sundial-go/sundial/operations"
)

// ClientTransport returns the client.Transport of the adapter's operations
// over cc, a connection to a server whose adapter was built from the same
// operations (see Call). A call invokes the operation's gRPC method with
// messages built from its Go types. It carries the context's deadline as
// grpc-timeout, and its W3C trace context and baggage as metadata. The
// server's grpc-retry-pushback-ms trailer applies, as with the client
// interceptor. A failed call gives back the server's outcome: its code
// (the ErrorInfo reason), message, details (the ErrorInfo metadata) and
// retry-after (RetryInfo). A status without an ErrorInfo is converted by
// FromStatus. Give the outbound policy to the client
// (client.WithDependency), not to cc.
func (a *Adapter) ClientTransport(cc grpc.ClientConnInterface) client.Transport {
	return &clientTransport{a: a, cc: cc}
}

type clientTransport struct {
	a  *Adapter
	cc grpc.ClientConnInterface
}

// Bind implements client.Transport.
func (t *clientTransport) Bind(id string) (*operations.Descriptor, func(ctx context.Context, in, out any) error, error) {
	m := t.a.methodOf(id)
	if m == nil {
		return nil, nil, fmt.Errorf("grpcadapter: client: operation %q has no gRPC method in this adapter", id)
	}
	return m.Desc, func(ctx context.Context, in, out any) error { return m.invoke(ctx, t.cc, in, out) }, nil
}

// invoke makes one call of m over cc.
func (m *method) invoke(ctx context.Context, cc grpc.ClientConnInterface, in, out any) error {
	req, err := m.Request(in)
	if err != nil {
		return fmt.Errorf("grpcadapter: %w", err)
	}
	resp := dynamicpb.NewMessage(m.Output())
	var trailer metadata.MD
	if err := cc.Invoke(withTraceMetadata(ctx), m.Full, req, resp, grpc.Trailer(&trailer)); err != nil {
		return withPushback(rpccall.Answer(err), trailer)
	}
	if err := m.DecodeReply(resp, out); err != nil {
		return fmt.Errorf("grpcadapter: %w", err)
	}
	return nil
}
