package mcpadapter

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sundial-go/sundial/adapters/internal/outcome"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
)

// reply adds the reply of outcome o to res.
func (t *tool) reply(res *mcp.CallToolResult, o kernel.Outcome) {
	// The reply's fields (Idempotent-Replayed, RateLimit, ...), which
	// HTTP sends as headers, go in the result's _meta.
	if fields := o.Invocation.Reply().Fields(); len(fields) > 0 {
		reply := make(map[string]string, len(fields))
		for _, f := range fields {
			reply[f.Name] = f.Value
		}
		res.Meta = mcp.Meta{metaReply: reply}
	}
}

// metaReply is the result's _meta member of the reply's fields.
const metaReply = "sundial/reply"

// answer returns the tool result of outcome o, without the reply: the
// output as JSON text, and as structuredContent when it is an object; or,
// on failure, the Problem Details with isError.
func (t *tool) answer(o kernel.Outcome) *mcp.CallToolResult {
	if o.Err != nil {
		return failure(pipeline.AsError(o.Err), t.desc.ID, o.TraceID)
	}
	body, err := json.Marshal(o.Output)
	if err != nil {
		return failure(pipeline.Wrap(pipeline.KindUnexpected, pipeline.CodeUnexpected, pipeline.UnexpectedMessage,
			fmt.Errorf("mcpadapter: encoding the output of %q: %w", t.desc.ID, err)), t.desc.ID, o.TraceID)
	}
	if string(body) == "null" {
		body = []byte("{}")
	}
	res := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(body)}}}
	if t.structured {
		res.StructuredContent = json.RawMessage(body)
	}
	return res
}

// failure returns the tool result of failure e: isError, the Problem
// Details as structuredContent, and one sentence as text.
func failure(e *pipeline.Error, name, traceID string) *mcp.CallToolResult {
	e = outcome.NameFields(e, outcome.JSONPointer)
	details := outcome.Details(e)
	if details == nil {
		details = map[string]any{}
	}
	problem := map[string]any{
		"type":     outcome.TypePrefix + e.Code(),
		"title":    e.Kind().String(),
		"status":   outcome.HTTPStatus.For(e.Kind()),
		"detail":   outcome.SafeMessage(e),
		"instance": "tools/call " + name,
		"code":     e.Code(),
		"traceId":  traceID,
		"details":  details,
	}
	if _, err := json.Marshal(details); err != nil {
		problem["details"] = map[string]any{} // details that do not encode
	}
	return &mcp.CallToolResult{IsError: true, StructuredContent: problem,
		Content: []mcp.Content{&mcp.TextContent{Text: sentence(e)}}}
}

// sentence says a failure in one sentence an agent can act on, ending in
// its code: "rate limited; retry after 12 seconds (KERNEL_UNAVAILABLE_002)".
func sentence(e *pipeline.Error) string {
	var what string
	switch e.Code() {
	case "KERNEL_UNAVAILABLE_002":
		what = "rate limited"
	case "KERNEL_UNAVAILABLE_003":
		what = "too many calls in progress"
	case "KERNEL_UNAVAILABLE_004":
		what = "circuit open: the operation is failing"
	case "KERNEL_UNAVAILABLE_008":
		what = "shed under load"
	case codeBusy:
		what = "too many tool calls in progress"
	case pipeline.CodeTimeout:
		what = "timed out: the deadline passed before the operation finished; retry with a longer deadline"
	case pipeline.CodeCanceled:
		what = "cancelled before the operation finished"
	default:
		what = strings.TrimSuffix(outcome.SafeMessage(e), ".")
	}
	if vs := operations.Violations(e); len(vs) > 0 {
		parts := make([]string, len(vs))
		for i, v := range vs {
			parts[i] = v.Field + " " + strings.TrimSuffix(v.Message, ".")
		}
		what = "invalid arguments: " + strings.Join(parts, "; ") + "; correct them and call again"
	}
	if s, ok := outcome.RetryAfterSeconds(e); ok && e.Kind() != pipeline.KindUnexpected {
		unit := "seconds"
		if s == 1 {
			unit = "second"
		}
		what += fmt.Sprintf("; retry after %d %s", s, unit)
	}
	return fmt.Sprintf("%s (%s).", what, e.Code())
}
