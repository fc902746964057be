package grpcadapter

import (
	"context"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sundial-go/sundial/adapters/internal/rpccall"
	"github.com/sundial-go/sundial/kernel"
)

// codeUnknownMethod is the code of a call to a method the server does not
// serve.
const codeUnknownMethod = rpccall.CodeUnknownMethod

// UnknownServiceHandler answers calls to methods that no service on the
// server implements. It answers as grpc-go does by default:
// codes.Unimplemented with "unknown service …" or "unknown method …". But
// it answers through the kernel as a rejection (kernel.Kernel.Reject). The
// outcome is NOT_FOUND, with code GRPC_NOT_FOUND_001 and detail "method".
// So like every other answer it gets a span, metrics, a trace ID and a call
// log record. Install it with grpc.UnknownServiceHandler:
//
//	srv := grpc.NewServer(grpc.UnknownServiceHandler(a.UnknownServiceHandler))
//
// The invocations are named "(unknown)", whatever the method. So a scan of
// random method names cannot use up the telemetry's bounded set of route
// names. The call log record has the method.
func (a *Adapter) UnknownServiceHandler(_ any, stream grpc.ServerStream) error {
	start := time.Now()
	ctx := stream.Context()
	full, ok := grpc.MethodFromServerStream(stream)
	if !ok {
		full = "(unknown)"
	}
	parent, stop := a.inbound(ctx)
	defer stop()
	o, st := a.unknownCall(parent, a.metadata(ctx, "", full), full)
	a.logCall(ctx, full, o, st, start)
	if o.TraceID != "" {
		_ = grpc.SetTrailer(ctx, metadata.Pairs(metadataTraceID, o.TraceID))
	}
	return st.Err()
}

// unknownCall answers a call of the unknown method full, whose request
// metadata are md, through the kernel. It returns the outcome and the
// status of the answer.
func (a *Adapter) unknownCall(parent context.Context, md rpccall.Carrier, full string) (kernel.Outcome, *status.Status) {
	return a.srv.Unknown(parent, md, full, func(svc string) bool {
		return slices.ContainsFunc(a.services, func(sd *grpc.ServiceDesc) bool { return sd.ServiceName == svc })
	})
}
