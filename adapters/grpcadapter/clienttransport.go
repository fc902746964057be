package grpcadapter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/sundial-go/sundial/adapters/internal/outcome"
	"github.com/sundial-go/sundial/kernel/client"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
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
		return withPushback(answer(err), trailer)
	}
	if err := m.DecodeReply(resp, out); err != nil {
		return fmt.Errorf("grpcadapter: %w", err)
	}
	return nil
}

// answer returns the outcome a server's status carries: the inverse of
// Status for a Sundial server. A status without an ErrorInfo reason, or
// an error without a status, is FromStatus's.
func answer(err error) (out error) {
	defer func() {
		if recover() != nil {
			out = FromStatus(err) // a typed nil in the chain: FromStatus leaves it as it is
		}
	}()
	gs, ok := errors.AsType[interface {
		error
		GRPCStatus() *status.Status
	}](err)
	if !ok {
		return FromStatus(err)
	}
	st := gs.GRPCStatus()
	var (
		info  *errdetails.ErrorInfo
		retry *errdetails.RetryInfo
	)
	for _, d := range st.Details() {
		switch x := d.(type) {
		case *errdetails.ErrorInfo:
			info = x
		case *errdetails.RetryInfo:
			retry = x
		}
	}
	if info == nil || info.GetReason() == "" {
		return FromStatus(err)
	}
	e := pipeline.Wrap(kindFor(st.Code()), info.GetReason(), st.Message(), err)
	for k, v := range info.GetMetadata() {
		if k != outcome.DetailRetryAfter {
			e = e.WithDetail(k, metadataValue(v))
		}
	}
	if rd := retry.GetRetryDelay(); rd != nil && rd.IsValid() && rd.AsDuration() >= 0 {
		e = e.WithRetryAfter(rd.AsDuration())
	}
	return e
}

// metadataValue reads back a details value that Status wrote as a string:
// a number, a boolean, an object or an array as JSON, anything else as the
// string.
func metadataValue(s string) any {
	var v any
	if json.Unmarshal([]byte(s), &v) == nil {
		switch v.(type) {
		case float64, bool, map[string]any, []any:
			return v
		}
	}
	return s
}
