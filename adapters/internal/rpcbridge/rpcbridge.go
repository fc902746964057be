// Package rpcbridge lets an adapter serve the methods a grpcadapter.Adapter
// built, over another protocol, without copying how they are built.
//
// The gRPC adapter sets Of when its package is initialised. Another
// adapter that imports grpcadapter then reaches an Adapter's methods
// through it: unary and streaming.
package rpcbridge

import (
	"context"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/sundial-go/sundial/kernel"
)

// Method is one method of an operation. Its kind is the operation's
// (Op.Descriptor().Kind()).
type Method struct {
	// Full is the method's full name: "/shop.v1.Orders/Create".
	Full string
	// Op is the operation's handle.
	Op *kernel.Op
	// Desc describes the method, its request and its response.
	Desc protoreflect.MethodDescriptor
	// Input converts a request message to the operation's input. Its
	// error is the call's rejection.
	Input func(*dynamicpb.Message) (any, error)
	// Output converts the operation's result to the response message.
	Output func(any) (*dynamicpb.Message, error)
	// Message converts one message of a client or bidi stream to the
	// operation's input. It checks no constraint: the kernel does.
	Message func(*dynamicpb.Message) (any, error)
}

// Carrier is a call's request metadata: the caller's headers.
type Carrier interface {
	propagation.TextMapCarrier
	// Values returns every value of key.
	Values(key string) []string
}

// Server is what another adapter uses of a gRPC adapter.
type Server interface {
	// Methods returns the methods of every kind, sorted by full name.
	Methods() []Method
	// Header returns the HTTP request headers h of a call of m as its
	// metadata, its baggage hidden when over the adapter's limit.
	Header(ctx context.Context, h http.Header, m *Method) Carrier
	// Enter prepares a call of m whose server context is ctx and whose
	// headers are md. It fills in c and returns the invocation's parent
	// context: ctx's deadline attributed as on gRPC, and the trace
	// context and baggage of md. Call stop once the kernel has answered.
	Enter(ctx context.Context, md Carrier, m *Method, c *kernel.Caller) (parent context.Context, stop func())
	// Unknown answers a call of the unknown method full, whose request
	// headers are h, through the kernel, and logs it with msg. It returns
	// the outcome and the status of the answer.
	Unknown(ctx context.Context, h http.Header, full, msg string) (kernel.Outcome, *status.Status)
	// Answer logs a call with msg and returns the status of its outcome:
	// nil on success.
	Answer(ctx context.Context, m *Method, o kernel.Outcome, start time.Time, msg string) *status.Status
}

// Of returns the Server of a *grpcadapter.Adapter, or nil for any other
// value. The gRPC adapter sets it.
var Of func(adapter any) Server
