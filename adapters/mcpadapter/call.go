package mcpadapter

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sundial-go/sundial/adapters/internal/jsontype"
	"github.com/sundial-go/sundial/adapters/internal/outcome"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/kernel/propagation"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
)

// The _meta keys a tool call may carry (see the package doc).
const (
	metaTimeout     = "sundial/timeoutMs"
	metaPriority    = "sundial/priority"
	metaIdempotency = "sundial/idempotency-key"
)

// maxTimeoutMs bounds sundial/timeoutMs: 12 digits of milliseconds, as
// the HTTP adapter's relative deadline header.
const maxTimeoutMs = 999_999_999_999

// maxTraceBytes bounds the trace context and baggage a call carries in
// _meta or headers (W3C baggage's own limit); more is dropped.
const maxTraceBytes = 8192

// Codes of the failures the adapter itself produces.
const (
	// codeWrongType: an argument has the wrong JSON type for its field.
	codeWrongType = "MCP_VALIDATION_001"
	// codeBusy: MaxPending tool calls are in progress.
	codeBusy = "MCP_UNAVAILABLE_001"
	// codeBadDeadline is the kernel's code of a malformed deadline.
	codeBadDeadline = "KERNEL_VALIDATION_002"
)

// errBusy is the answer to a tool call over MaxPending.
var errBusy = pipeline.NewError(pipeline.KindUnavailable, codeBusy,
	"The server has too many tool calls in progress; retry after 1 second.").WithRetryAfter(time.Second)

// call runs one tool call: one invocation of the operation through its
// handle.
func (t *tool) call(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	start := time.Now()
	s := t.s
	p := req.Params
	var header http.Header
	if req.Extra != nil {
		header = req.Extra.Header
	}
	ctx = traceContext(ctx, p.Meta, header)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.stopped, cancel)()
	var u kernel.Unary
	u.Protocol, u.Route, u.Arrival = pipeline.ProtocolMCP, "tools/call "+t.desc.ID, start
	callerMeta(&u.Caller, p.Meta)
	var o kernel.Outcome
	r := &progressRaw{} // a stream's messages: none unless it opens
	switch deadline, err := metaDeadline(p.Meta, start); {
	case !isObject(p.Arguments):
		// Malformed arguments are a protocol error; the kernel still
		// observes the call.
		o = t.op.Reject(ctx, u.Caller, errNotObject)
		t.s.logCall(ctx, t.desc.ID, sessionID(req), start, codeOf(o.Err), false, o.TraceID)
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams,
			Message: fmt.Sprintf("tool %q: arguments must be a JSON object", t.desc.ID)}
	case err != nil:
		o = t.op.Reject(ctx, u.Caller, err)
	case s.pending.Add(1) > int64(s.opts.MaxPending):
		s.pending.Add(-1)
		o = t.op.Reject(ctx, u.Caller, errBusy)
	case t.streams:
		u.Deadline = deadline
		o, r = t.stream(ctx, req, u.Caller)
		s.pending.Add(-1)
	default:
		u.Deadline = deadline
		u.Decode = func(time.Time) (any, error) { return t.decode(p.Arguments) }
		o = t.op.Handle(ctx, u)
		s.pending.Add(-1)
	}
	res := t.answer(o)
	if t.streams {
		res = t.streamResult(o, r)
	}
	return t.finish(ctx, req, start, o, res), nil
}

// finish adds the reply of outcome o to res, logs the call and returns
// res.
func (t *tool) finish(ctx context.Context, req *mcp.CallToolRequest, start time.Time, o kernel.Outcome,
	res *mcp.CallToolResult) *mcp.CallToolResult {
	t.reply(res, o)
	e := pipeline.AsError(o.Err)
	t.s.logCall(ctx, t.desc.ID, sessionID(req), start, codeOf(o.Err), o.Err != nil && e.Kind() == pipeline.KindUnexpected, o.TraceID)
	return res
}

// errNotObject is the outcome of arguments that are not a JSON object.
var errNotObject = pipeline.NewError(pipeline.KindValidation, pipeline.CodeValidation,
	"The arguments must be a JSON object.")

// isObject reports whether raw is absent, null or a JSON object.
func isObject(raw json.RawMessage) bool {
	b := bytes.TrimSpace(raw)
	return len(b) == 0 || string(b) == "null" || b[0] == '{'
}

func sessionID(req *mcp.CallToolRequest) string {
	if req.Session == nil {
		return ""
	}
	return req.Session.ID()
}

func codeOf(err error) string {
	if err == nil {
		return ""
	}
	return pipeline.AsError(err).Code()
}

// decode decodes the arguments into a new input: the operation's input
// policy first (unknown fields, key case: the same answer as over HTTP),
// then the JSON, then the constraints, every failing field at once.
func (t *tool) decode(args json.RawMessage) (any, error) {
	d := t.desc
	in := d.NewInput()
	if b := bytes.TrimSpace(args); len(b) > 0 && string(b) != "null" {
		if perr := operations.CheckJSON(d.Input, d.InputPolicy, b); perr != nil {
			return nil, perr
		}
		if err := json.Unmarshal(b, in); err != nil {
			return nil, argumentError(err)
		}
	}
	if perr := d.CheckConstraints(in); perr != nil {
		return nil, perr // failure names the fields by JSON pointers
	}
	return in, nil
}

// argumentError turns a json.Unmarshal error into a VALIDATION outcome
// that names the field, without Go type names.
func argumentError(err error) *pipeline.Error {
	if pe, ok := errors.AsType[*pipeline.Error](err); ok && pe != nil {
		return pe // an input's UnmarshalJSON spoke for itself
	}
	if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok && te != nil && te.Type != nil {
		want := jsontype.Of(te.Type)
		if want == "" {
			want = "a different type"
		}
		field := outcome.JSONPointer(te.Field)
		return pipeline.NewError(pipeline.KindValidation, codeWrongType,
			fmt.Sprintf("The argument %s must be %s; got %s.", field, withArticle(want), te.Value)).
			WithDetail("field", field).WithDetail("expected", want)
	}
	return pipeline.NewError(pipeline.KindValidation, codeWrongType, "The arguments could not be decoded.")
}

func withArticle(w string) string {
	switch w {
	case "integer", "array", "object":
		return "an " + w
	case "a different type":
		return w
	}
	return "a " + w
}

// metaDeadline returns the caller's deadline from _meta (the zero time:
// none), or a KERNEL_VALIDATION_002 outcome when it is malformed.
func metaDeadline(meta mcp.Meta, now time.Time) (time.Time, error) {
	v, ok := meta[metaTimeout]
	if !ok {
		return time.Time{}, nil
	}
	ms, ok := v.(float64)
	if !ok || ms < 0 || ms > maxTimeoutMs || ms != math.Trunc(ms) {
		return time.Time{}, pipeline.NewError(pipeline.KindValidation, codeBadDeadline,
			fmt.Sprintf("The _meta member %q is malformed: want an integer of milliseconds, 0 to %d.", metaTimeout, int64(maxTimeoutMs))).
			WithDetail("field", "_meta/"+metaTimeout)
	}
	return now.Add(time.Duration(ms) * time.Millisecond), nil
}

// callerMeta fills in the caller's priority and idempotency key from
// _meta. A value of the wrong type is one the kernel rejects.
func callerMeta(c *kernel.Caller, meta mcp.Meta) {
	if v, ok := meta[metaPriority]; ok {
		c.Priority, _ = v.(string)
		if c.Priority == "" {
			c.Priority = "-" // names no class: KERNEL_VALIDATION_009
		}
	}
	if v, ok := meta[metaIdempotency]; ok {
		key, isString := v.(string)
		c.IdempotencyKey, c.BadIdempotencyKey = key, !isString || key == ""
	}
}

// traceContext returns ctx with the caller's W3C trace context and
// baggage: from _meta, else from the HTTP request's headers. Values over
// maxTraceBytes are dropped.
func traceContext(ctx context.Context, meta mcp.Meta, header http.Header) context.Context {
	md := map[string][]string{}
	for _, key := range [...]string{"traceparent", "tracestate", "baggage"} {
		v, _ := meta[key].(string)
		if v == "" && header != nil {
			v = strings.Join(header.Values(key), ",")
		}
		if v != "" && len(v) <= maxTraceBytes {
			md[key] = []string{v}
		}
	}
	if len(md) == 0 {
		return ctx
	}
	return propagation.ExtractGRPC(ctx, md)
}
