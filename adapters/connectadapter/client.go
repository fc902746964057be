package connectadapter

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/sundial-go/sundial/adapters/internal/rpccall"
	"github.com/sundial-go/sundial/adapters/internal/rpcschema"
	"github.com/sundial-go/sundial/kernel/client"
	"github.com/sundial-go/sundial/kernel/propagation"
	"github.com/sundial-go/sundial/operations"
)

// ClientTransport returns the client.Transport of the operations in reg,
// served by New or Mount at base, such as "http://billing:8080". A call
// is a unary call over the Connect protocol, through hc (nil:
// http.DefaultClient). Its messages are binary protobuf, built from the
// operation's Go types as New builds them: give the server's WithPackage.
// WithReadLimit bounds the reply; the other options do nothing here.
//
// Each attempt carries what remains of the context's deadline as
// Connect-Timeout-Ms. One whose deadline has passed is not sent. It
// carries the W3C trace context and baggage as headers. The caller's
// priority, idempotency key and retry mark go in the baggage. A failed
// call gives back the server's outcome: its code (the ErrorInfo reason),
// message, details (the ErrorInfo metadata) and retry-after (RetryInfo).
// An error without an ErrorInfo is converted as grpcadapter.FromStatus
// converts a status with the same code. Give the outbound policy to the
// client (client.WithDependency), not to hc.
func ClientTransport(reg *operations.Registry, base string, hc connect.HTTPClient, opts ...Option) client.Transport {
	t := &clientTransport{reg: reg, base: strings.TrimSuffix(base, "/"), hc: hc,
		cfg: config{readLimit: defaultReadLimit, pkg: defaultPackage}}
	if t.hc == nil {
		t.hc = http.DefaultClient
	}
	for _, o := range opts {
		if o != nil {
			o.apply(&t.cfg)
		}
	}
	return t
}

type clientTransport struct {
	reg  *operations.Registry
	base string
	hc   connect.HTTPClient
	cfg  config

	once sync.Once
	set  *rpcschema.Set // built at the first Bind
	err  error
}

// Bind implements client.Transport.
func (t *clientTransport) Bind(id string) (*operations.Descriptor, func(ctx context.Context, in, out any) error, error) {
	if t.reg == nil {
		return nil, nil, fmt.Errorf("connectadapter: client of %q: nil registry", id)
	}
	t.once.Do(func() {
		if t.set, t.err = rpcschema.BuildClient(t.reg.All(), t.cfg.pkg); t.err != nil {
			t.err = fmt.Errorf("connectadapter: client: %w", t.err)
		}
	})
	if t.err != nil {
		return nil, nil, t.err
	}
	m := t.set.MethodOf(id)
	if m == nil {
		return nil, nil, fmt.Errorf("connectadapter: client: the registry has no operation %q", id)
	}
	out := m.Output()
	c := &clientCall{m: m, cc: connect.NewClient[dynamicpb.Message, dynamicpb.Message](t.hc, t.base+m.Full,
		connect.WithSchema(m.RPC),
		connect.WithResponseInitializer(func(_ connect.Spec, msg any) error {
			if r, ok := msg.(*dynamicpb.Message); ok {
				*r = *dynamicpb.NewMessage(out)
			}
			return nil
		}),
		connect.WithReadMaxBytes(t.cfg.readLimit),
	)}
	return m.Desc, c.send, nil
}

// clientCall sends the calls of one operation.
type clientCall struct {
	m  *rpcschema.Method
	cc *connect.Client[dynamicpb.Message, dynamicpb.Message]
}

// send sends one attempt with the input in (a pointer) and decodes the
// reply into out (a pointer).
func (c *clientCall) send(ctx context.Context, in, out any) error {
	msg, err := c.m.Request(in)
	if err != nil {
		return fmt.Errorf("connectadapter: %w", err)
	}
	if d, ok := ctx.Deadline(); ok && time.Until(d) <= 0 {
		return fmt.Errorf("connectadapter: %s: the deadline passed before the call was sent: %w",
			c.m.Full, context.DeadlineExceeded)
	}
	req := connect.NewRequest(msg)
	propagation.InjectHTTP(ctx, req.Header())
	resp, err := c.cc.CallUnary(ctx, req)
	if err != nil {
		return answer(err)
	}
	if err := c.m.DecodeReply(resp.Msg, out); err != nil {
		return fmt.Errorf("connectadapter: %w", err)
	}
	return nil
}

// answer returns the outcome a Connect error carries, read as the gRPC
// status of the same code, message and details.
func answer(err error) error {
	ce, ok := errors.AsType[*connect.Error](err)
	if !ok {
		return err
	}
	sp := &spb.Status{Code: int32(ce.Code()), Message: ce.Message()}
	for _, d := range ce.Details() {
		sp.Details = append(sp.Details, &anypb.Any{TypeUrl: typeURLPrefix + d.Type(), Value: d.Bytes()})
	}
	return rpccall.Answer(statusError{err: err, st: status.FromProto(sp)})
}

// typeURLPrefix prefixes the type of an error detail in its Any.
const typeURLPrefix = "type.googleapis.com/"

// statusError is a Connect error with its gRPC status.
type statusError struct {
	err error
	st  *status.Status
}

func (e statusError) Error() string              { return e.err.Error() }
func (e statusError) Unwrap() error              { return e.err }
func (e statusError) GRPCStatus() *status.Status { return e.st }
