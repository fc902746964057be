package mcpadapter

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sundial-go/sundial/adapters/internal/outclock"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/pipeline"
)

// The bounds of the messages a server stream's tool result keeps: the
// last ones, at most keptMessages of them and keptBytes of their JSON.
// Progress notifications carry every message.
const (
	keptMessages = 1000
	keptBytes    = 1 << 20
)

// progressRaw is a server stream's transport as a tool call: each message
// is one progress notification, and the result keeps the last messages.
// The handler's goroutine calls Send; Abort may come from any goroutine.
type progressRaw struct {
	ctx      context.Context // the call's: its notifications relate to its request
	ss       *mcp.ServerSession
	token    any         // the request's progress token; nil: no notifications
	unblock  func()      // fails a blocked write of the request's HTTP response; nil: none
	inflight atomic.Bool // a notification is being written
	abort    chan struct{}
	once     sync.Once
	cause    error // set before abort closes

	count int64             // the messages sent
	kept  []json.RawMessage // the last messages, within the bounds
	bytes int               // the bytes of kept
}

// Send sends m's JSON as one progress notification, when the caller sent
// a progress token, and keeps it for the result. A notification blocked
// for the stream's send stall is abandoned when the stream aborts it.
func (r *progressRaw) Send(m any) error {
	b, err := json.Marshal(m)
	if err != nil {
		return pipeline.Wrap(pipeline.KindUnexpected, pipeline.CodeUnexpected, pipeline.UnexpectedMessage,
			fmt.Errorf("mcpadapter: encoding a message: %w", err))
	}
	r.count++
	r.keep(b)
	if r.token == nil || r.ss == nil {
		return nil
	}
	p := &mcp.ProgressNotificationParams{ProgressToken: r.token, Message: string(b), Progress: float64(r.count)}
	// The SDK writes a notification to the client's connection and blocks
	// while the client does not read. It runs apart, so Abort can end
	// the wait; the write itself ends when unblock cuts the connection.
	done := make(chan error, 1)
	r.inflight.Store(true)
	go func() {
		err := r.ss.NotifyProgress(r.ctx, p)
		r.inflight.Store(false)
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-r.abort:
		return r.cause
	}
}

// keep appends b to the kept messages and drops the oldest beyond the
// bounds. A message over keptBytes alone is not kept.
func (r *progressRaw) keep(b []byte) {
	r.kept = append(r.kept, b)
	r.bytes += len(b)
	drop := 0
	for len(r.kept)-drop > keptMessages || r.bytes > keptBytes {
		r.bytes -= len(r.kept[drop])
		drop++
	}
	clear(r.kept[:drop]) // the array holds no dropped message
	r.kept = r.kept[drop:]
}

// Recv returns io.EOF: a server stream's caller sends its request only.
func (r *progressRaw) Recv() (any, int, error) { return nil, 0, io.EOF }

// writeGrace is how long a notification's write may go on after the
// stream ended before Abort cuts the HTTP response it blocks.
const writeGrace = time.Second

// Abort ends a blocked Send with cause. A notification still being
// written writeGrace later is blocked by a client that does not read:
// Abort then fails its write, which ends the HTTP response. After a send
// stall it does so whatever is being written then, the result included:
// the stall may have come just as a notification's write ended, and the
// client that stalled it would hold the result's write as well.
func (r *progressRaw) Abort(cause error) {
	r.once.Do(func() {
		r.cause = cause
		close(r.abort)
		if r.unblock == nil {
			return
		}
		stalled := pipeline.AsError(cause).Code() == outclock.CodeSendStall
		if stalled || r.inflight.Load() {
			time.AfterFunc(writeGrace, func() {
				if stalled || r.inflight.Load() {
					r.unblock() // nothing when the response has ended
				}
			})
		}
	})
}

// stream runs one call of a server stream: each message a progress
// notification, the last messages and the outcome in the result.
func (t *tool) stream(ctx context.Context, req *mcp.CallToolRequest, c kernel.Caller) (kernel.Outcome, *progressRaw) {
	r := &progressRaw{ctx: ctx, ss: req.Session, token: req.Params.GetProgressToken(), abort: make(chan struct{})}
	if req.Extra != nil {
		r.unblock = t.s.writers.unblocker(req.Extra.Header)
	}
	o := t.op.Stream(ctx, kernel.StreamCall{Caller: c, Raw: r,
		Decode: func(time.Time) (any, error) { return t.decode(req.Params.Arguments) }})
	return o, r
}

// streamResult returns the tool result of a server stream that ended with
// o: the kept messages, their count and the messages omitted, plus the
// Problem Details on failure.
func (t *tool) streamResult(o kernel.Outcome, r *progressRaw) *mcp.CallToolResult {
	messages := r.kept
	if messages == nil {
		messages = []json.RawMessage{}
	}
	if o.Err != nil {
		res := failure(pipeline.AsError(o.Err), t.desc.ID, o.TraceID)
		problem := res.StructuredContent.(map[string]any)
		problem["messages"], problem["count"], problem["omitted"] = messages, r.count, r.count-int64(len(r.kept))
		return res
	}
	body, _ := json.Marshal(streamOutput{Messages: messages, Count: r.count, Omitted: r.count - int64(len(r.kept))})
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(body)}},
		StructuredContent: json.RawMessage(body)}
}

// streamOutput is a server stream's successful tool result.
type streamOutput struct {
	Messages []json.RawMessage `json:"messages"`
	Count    int64             `json:"count"`
	Omitted  int64             `json:"omitted"`
}

// streamSchema returns the outputSchema of a server stream's tool: the
// kept messages, each of schema message, their count and those omitted.
func streamSchema(message json.RawMessage) (json.RawMessage, error) {
	if message == nil {
		message = json.RawMessage(`{}`)
	}
	return json.Marshal(map[string]any{
		"type": "object",
		"properties": map[string]any{
			"messages": map[string]any{"type": "array", "items": message,
				"description": "The last messages sent: at most 1000, and 1 MiB of JSON."},
			"count":   map[string]any{"type": "integer", "minimum": 0, "description": "The messages sent."},
			"omitted": map[string]any{"type": "integer", "minimum": 0, "description": "The first messages left out."},
		},
		"required":             []string{"messages", "count", "omitted"},
		"additionalProperties": false,
	})
}
