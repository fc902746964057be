package grpcadapter

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/sundial-go/sundial/operations"
)

// Call invokes the operation id over cc with the operation's Go types and
// no generated stubs. cc is a connection to a server whose adapter was
// built from the same operations: the same Go types, the same WithPackage.
// in is a value of the operation's input type, or a pointer to one; nil
// sends an empty message. The reply is decoded into out, a non-nil pointer
// to the output type. It is discarded when out is nil.
//
// To call another service, build an Adapter from a kernel whose registry
// holds that service's operations. Their handlers never run on this side.
// Keep the Adapter for the life of the client. The call runs through cc's
// interceptors; UnaryClientInterceptor caps it. A streaming operation is
// refused: Call makes unary calls. It carries ctx's deadline
// as grpc-timeout. A failure comes back as an outcome (FromStatus): a
// downstream DeadlineExceeded is a TIMEOUT.
func (a *Adapter) Call(ctx context.Context, cc grpc.ClientConnInterface, id string, in, out any, opts ...grpc.CallOption) error {
	m := a.methodOf(id)
	if m == nil {
		return fmt.Errorf("grpcadapter: Call: operation %q has no gRPC method in this adapter", id)
	}
	if k := m.Desc.Kind(); k != operations.Unary {
		return fmt.Errorf("grpcadapter: Call: operation %q is a %v; Call makes unary calls", id, k)
	}
	req, err := m.Request(in)
	if err != nil {
		return fmt.Errorf("grpcadapter: %w", err)
	}
	resp := dynamicpb.NewMessage(m.Output())
	if err := cc.Invoke(ctx, m.Full, req, resp, opts...); err != nil {
		return FromStatus(err)
	}
	if err := m.DecodeReply(resp, out); err != nil {
		return fmt.Errorf("grpcadapter: %w", err)
	}
	return nil
}

// methodOf returns the method of operation id, or nil.
func (a *Adapter) methodOf(id string) *method {
	if x := a.set.MethodOf(id); x != nil {
		return a.methods[x.Full]
	}
	return nil
}
