package grpcadapter

import (
	"context"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sundial-go/sundial/adapters/internal/rpccall"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/pipeline"
)

// This file answers a call: its status, its response fields and its log
// record.

// answer writes the call log record of one call and returns the status
// error of its outcome (nil on success).
func (a *Adapter) answer(ctx context.Context, full string, o kernel.Outcome, start time.Time) error {
	st := Status(o.Err, a.cfg.rpc.Domain)
	a.logCall(ctx, full, o, st, start)
	sendReply(ctx, o.Invocation)
	if st != nil && o.TraceID != "" {
		// A failure names its trace, as an HTTP problem's traceId does.
		_ = grpc.SetTrailer(ctx, metadata.Pairs(metadataTraceID, o.TraceID))
	}
	return st.Err()
}

// sendReply sends the fields of the invocation's reply (RateLimit-Policy
// and RateLimit, Idempotent-Replayed, ...) as header metadata, their names
// lower-cased, with the response or the status alike.
func sendReply(ctx context.Context, inv *pipeline.Invocation) {
	fields := inv.Reply().Fields()
	if len(fields) == 0 {
		return
	}
	kv := make([]string, 0, 2*len(fields))
	for _, f := range fields {
		if name := strings.ToLower(f.Name); validMetadata(name, f.Value) {
			kv = append(kv, name, f.Value)
		}
	}
	if len(kv) > 0 {
		_ = grpc.SetHeader(ctx, metadata.Pairs(kv...))
	}
}

// validMetadata reports whether name and value can be sent as gRPC
// header metadata: a key of 0-9 a-z - _ . not reserved by gRPC ("grpc-")
// nor binary ("-bin"), and a printable ASCII value. A field that cannot is
// left out rather than let it fail the others (or the call).
func validMetadata(name, value string) bool {
	if name == "" || rpccall.OwnedHeader(name) || strings.HasSuffix(name, "-bin") {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	for i := 0; i < len(value); i++ {
		if value[i] < 0x20 || value[i] > 0x7e {
			return false
		}
	}
	return true
}

// metadataTraceID is the trailer key under which a failed call's trace ID
// goes back to the client (as an HTTP problem's "traceId" does).
const metadataTraceID = "sundial-trace-id"

// logCall writes the call log record of one call, answered with status st:
// Info, or Error for an UNEXPECTED outcome (whose internal text is logged,
// never sent). Calls their clients canceled are counted, and only a few
// get a record each (see rpccall.Canceled).
func (a *Adapter) logCall(ctx context.Context, full string, o kernel.Outcome, st *status.Status, start time.Time) {
	a.logCallAs(ctx, full, o, st, start, "grpc call")
}

// logCallAs is logCall with the record's message msg.
func (a *Adapter) logCallAs(ctx context.Context, full string, o kernel.Outcome, st *status.Status, start time.Time, msg string) {
	a.srv.LogCall(ctx, full, o, st, start, msg)
}
