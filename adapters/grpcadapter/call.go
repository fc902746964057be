package grpcadapter

import (
	"context"
	"fmt"
	"reflect"

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
	if k := m.desc.Kind(); k != operations.Unary {
		return fmt.Errorf("grpcadapter: Call: operation %q is a %v; Call makes unary calls", id, k)
	}
	req, err := m.request(in)
	if err != nil {
		return err
	}
	resp := dynamicpb.NewMessage(m.out.desc)
	if err := cc.Invoke(ctx, m.full, req, resp, opts...); err != nil {
		return FromStatus(err)
	}
	return m.decodeReply(resp, out)
}

// decodeReply decodes resp into out, a pointer to the output type; a nil out
// discards it.
func (m *method) decodeReply(resp *dynamicpb.Message, out any) error {
	if out == nil || m.out.empty {
		return nil
	}
	ov := reflect.ValueOf(out)
	if ov.Kind() != reflect.Pointer || ov.IsNil() || ov.Elem().Type() != m.out.goType {
		return fmt.Errorf("grpcadapter: Call %q: out of type %T, want *%v", m.desc.ID, out, m.out.goType)
	}
	return m.out.decode(resp, ov.Elem())
}

// methodOf returns the method of operation id, or nil.
func (a *Adapter) methodOf(id string) *method {
	for _, x := range a.methods {
		if x.desc.ID == id {
			return x
		}
	}
	return nil
}

// request returns the request message of a Call with input in: a value of
// the operation's input type, a pointer to one, or nil (an empty message).
func (m *method) request(in any) (*dynamicpb.Message, error) {
	req := dynamicpb.NewMessage(m.in.desc)
	v := reflect.ValueOf(in)
	if !v.IsValid() || m.in.empty {
		return req, nil
	}
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return req, nil
		}
		v = v.Elem()
	}
	if v.Type() != m.in.goType {
		return nil, fmt.Errorf("grpcadapter: Call %q: input of type %T, want %v", m.desc.ID, in, m.in.goType)
	}
	m.in.encode(v, req)
	return req, nil
}
