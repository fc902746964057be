package grpcadapter

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/sundial-go/sundial/adapters/internal/rpcbridge"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/pipeline"
)

// This file hands an Adapter's methods to another adapter (see
// rpcbridge), which serves them over another protocol.

func init() {
	rpcbridge.Of = func(x any) rpcbridge.Server {
		if a, ok := x.(*Adapter); ok && a != nil {
			return bridge{a}
		}
		return nil
	}
}

// bridge is an Adapter seen from another adapter.
type bridge struct{ a *Adapter }

// Methods returns the methods of every kind, sorted by full name.
func (b bridge) Methods() []rpcbridge.Method {
	out := make([]rpcbridge.Method, 0, len(b.a.methods))
	for full, m := range b.a.methods {
		svc, name := splitFull(full)
		d, err := b.a.files.FindDescriptorByName(protoreflect.FullName(svc + "." + name))
		md, ok := d.(protoreflect.MethodDescriptor)
		if err != nil || !ok {
			continue // not a method of the adapter's files: nothing to serve
		}
		out = append(out, rpcbridge.Method{Full: full, Op: m.op, Desc: md,
			Input: m.decodeInput, Output: m.encodeOutput, Message: m.convertInput})
	}
	slices.SortFunc(out, func(x, y rpcbridge.Method) int { return strings.Compare(x.Full, y.Full) })
	return out
}

// Enter prepares a call of m (see rpcbridge.Server).
func (b bridge) Enter(ctx context.Context, md rpcbridge.Carrier, m *rpcbridge.Method, c *kernel.Caller) (context.Context, func()) {
	parent, stop := b.a.inbound(ctx)
	return b.a.prepareFrom(md, parent, m.Full, c), stop
}

// Answer logs a call and returns the status of its outcome.
func (b bridge) Answer(ctx context.Context, m *rpcbridge.Method, o kernel.Outcome, start time.Time, msg string) *status.Status {
	st := Status(o.Err, b.a.cfg.domain)
	b.a.logCallAs(ctx, m.Full, o, st, start, msg)
	return st
}

// Unknown answers a call of the unknown method full through the kernel.
func (b bridge) Unknown(ctx context.Context, h http.Header, full string, msg string) (kernel.Outcome, *status.Status) {
	start := time.Now()
	parent, stop := b.a.inbound(ctx)
	defer stop()
	hm := headerMD{h: h}
	hm.noBaggage = b.a.baggageOver(ctx, h.Values(mdBaggage), "", full)
	o, st := b.a.unknownCall(parent, hm, full, pipeline.ProtocolConnect)
	b.a.logCallAs(ctx, full, o, st, start, msg)
	return o, st
}

// Header returns the request headers h of a call of m as its metadata.
// Baggage over the WithBaggageLimit is hidden.
func (b bridge) Header(ctx context.Context, h http.Header, m *rpcbridge.Method) rpcbridge.Carrier {
	hm := headerMD{h: h}
	hm.noBaggage = b.a.baggageOver(ctx, h.Values(mdBaggage), m.Op.Descriptor().ID, m.Full)
	return hm
}

// headerMD is a call's HTTP request headers as its metadata.
type headerMD struct {
	h         http.Header
	noBaggage bool
}

// Values returns the values of key.
func (m headerMD) Values(key string) []string {
	if m.noBaggage && strings.EqualFold(key, mdBaggage) {
		return nil
	}
	return m.h.Values(key)
}

func (m headerMD) Get(key string) string { return incomingMD{}.first(m.Values(key)) }

// Set does nothing: Extract only reads.
func (headerMD) Set(string, string) {}

func (m headerMD) Keys() []string {
	keys := make([]string, 0, len(m.h))
	for k := range m.h {
		if k = strings.ToLower(k); !m.noBaggage || k != mdBaggage {
			keys = append(keys, k)
		}
	}
	return keys
}
