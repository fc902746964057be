package mcpadapter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sundial-go/sundial/adapters/internal/schema"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
)

// Options configure New. The zero Options serve every unary operation
// and server stream within the default bounds.
type Options struct {
	// Name and Version name the server to clients; "sundial" and "0"
	// when empty.
	Name, Version string
	// Operations are the IDs of the operations served as tools; nil
	// serves every unary operation and server stream. An ID the kernel
	// does not serve, or of a client or bidi stream, fails New.
	Operations []string
	// MaxSessions bounds the live sessions of Streamable HTTP (1000 when
	// 0). A request that would open one more gets 503 with Retry-After.
	MaxSessions int
	// MaxPending bounds the tool calls in progress, all sessions and
	// transports together (1000 when 0). A call over it gets
	// UNAVAILABLE (MCP_UNAVAILABLE_001) with a retry-after of 1 second.
	MaxPending int
	// MaxMessageBytes bounds one message: an HTTP request body, a stdio
	// line (4 MiB when 0).
	MaxMessageBytes int
	// SessionIdle closes a Streamable HTTP session that sent no request
	// for that long (5 minutes when 0).
	SessionIdle time.Duration
}

// Defaults of Options.
const (
	defaultMaxSessions     = 1000
	defaultMaxPending      = 1000
	defaultMaxMessageBytes = 4 << 20
	defaultSessionIdle     = 5 * time.Minute
)

// Server serves a kernel's operations as MCP tools. Create it with New.
// It is an http.Handler: mount it on the HTTP server, e.g. at /mcp. It is
// safe for concurrent use.
type Server struct {
	k       *kernel.Kernel
	opts    Options
	srv     *mcp.Server
	http    *mcp.StreamableHTTPHandler
	logger  *slog.Logger
	pending atomic.Int64 // tool calls in progress
	posts   atomic.Int64 // HTTP POST requests in progress: their answers
	owed    atomic.Int64 // answers stdio sessions owe (stdioAnswers)
	writers writers      // the HTTP requests' writers, for a stalled stream
	closed  atomic.Bool
	// capMu guards places and the count of sessions against MaxSessions.
	capMu  sync.Mutex
	places places
	// stopped ends when Shutdown gives up waiting: it cancels every call.
	stopped context.Context
	stop    context.CancelFunc
}

// New returns the MCP server of k's operations: one tool per operation,
// built from its handle (kernel.Op) once. It fails when an operation of
// Options.Operations is not k's or takes a stream of inputs, or when an
// input is not a JSON object.
func New(k *kernel.Kernel, o *Options) (*Server, error) {
	if k == nil {
		return nil, errors.New("mcpadapter: New: nil kernel")
	}
	s := &Server{k: k, logger: k.Logger()}
	s.stopped, s.stop = context.WithCancel(context.Background())
	if o != nil {
		s.opts = *o
	}
	s.opts.setDefaults()
	ops, err := chosen(k, s.opts.Operations)
	if err != nil {
		return nil, err
	}
	s.srv = mcp.NewServer(&mcp.Implementation{Name: s.opts.Name, Version: s.opts.Version},
		&mcp.ServerOptions{Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}}})
	s.srv.AddReceivingMiddleware(s.admitSession)
	b := schema.NewBuilder(openapi3.Schemas{})
	for _, op := range ops {
		t, err := s.newTool(b, op)
		if err != nil {
			return nil, fmt.Errorf("mcpadapter: New: operation %q: %w", op.Descriptor().ID, err)
		}
		s.srv.AddTool(t.tool, t.call)
	}
	s.http = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.srv },
		&mcp.StreamableHTTPOptions{
			SessionTimeout:               s.opts.SessionIdle,
			MaxRequestBodyBytes:          int64(s.opts.MaxMessageBytes),
			PropagateRequestCancellation: true,
		})
	return s, nil
}

func (o *Options) setDefaults() {
	if o.Name == "" {
		o.Name = "sundial"
	}
	if o.Version == "" {
		o.Version = "0"
	}
	if o.MaxSessions <= 0 {
		o.MaxSessions = defaultMaxSessions
	}
	if o.MaxPending <= 0 {
		o.MaxPending = defaultMaxPending
	}
	if o.MaxMessageBytes <= 0 {
		o.MaxMessageBytes = defaultMaxMessageBytes
	}
	if o.SessionIdle <= 0 {
		o.SessionIdle = defaultSessionIdle
	}
}

// chosen returns the handles of the operations named by ids, in the
// kernel's order; every unary operation and server stream when ids is
// nil. A client or bidi stream is no tool: one tool call cannot carry a
// stream of inputs. Naming one fails.
func chosen(k *kernel.Kernel, ids []string) ([]*kernel.Op, error) {
	want := make(map[string]bool, len(ids))
	for _, id := range ids {
		want[id] = true
	}
	var ops []*kernel.Op
	for _, op := range k.Operations() {
		d := op.Descriptor()
		tool := d.Kind() == operations.Unary || d.Kind() == operations.ServerStream
		switch {
		case ids != nil && !want[d.ID]:
			continue
		case !tool && ids != nil:
			return nil, fmt.Errorf("mcpadapter: New: operation %q takes a stream of inputs, "+
				"which one tool call cannot send; only unary operations and server streams are tools", d.ID)
		case tool:
			ops = append(ops, op)
		}
		delete(want, d.ID)
	}
	for _, id := range ids {
		if want[id] {
			return nil, fmt.Errorf("mcpadapter: New: the kernel serves no operation %q", id)
		}
	}
	return ops, nil
}

// tool is one operation served as a tool, planned at New.
type tool struct {
	s    *Server
	op   *kernel.Op
	desc *operations.Descriptor
	tool *mcp.Tool
	// structured reports an output that is a JSON object: the result
	// carries it as structuredContent too.
	structured bool
	// streams reports a server stream: each message is a progress
	// notification, and the result keeps the last ones.
	streams bool
}

// newTool plans the tool of op: its name, description and schemas.
func (s *Server) newTool(b *schema.Builder, op *kernel.Op) (*tool, error) {
	d := op.Descriptor()
	in, err := inputSchema(b, d)
	if err != nil {
		return nil, err
	}
	t := &tool{s: s, op: op, desc: d, tool: &mcp.Tool{Name: d.ID, Description: d.Summary, InputSchema: in}}
	if t.tool.Description == "" {
		t.tool.Description = "The operation " + d.ID + "."
	}
	t.streams = d.Kind() == operations.ServerStream
	var out json.RawMessage
	if d.Output != nil {
		ref, err := b.Output(d.Output)
		if err != nil {
			return nil, fmt.Errorf("output: %w", err)
		}
		if ref.Value != nil {
			if out, err = json.Marshal(ref.Value); err != nil {
				return nil, fmt.Errorf("output: %w", err)
			}
			t.structured = ref.Value.Type.Is(openapi3.TypeObject)
		}
	}
	switch {
	case t.streams:
		if t.tool.OutputSchema, err = streamSchema(out); err != nil {
			return nil, fmt.Errorf("output: %w", err)
		}
	case t.structured:
		t.tool.OutputSchema = out
	}
	return t, nil
}

// inputSchema returns the JSON Schema of d's input, as the OpenAPI
// document has it. An input without fields is the empty object.
func inputSchema(b *schema.Builder, d *operations.Descriptor) (json.RawMessage, error) {
	if d.Input == nil || (d.Input.Kind() == reflect.Struct && d.Input.NumField() == 0) {
		return json.RawMessage(`{"type":"object","additionalProperties":false}`), nil
	}
	ref, err := b.Input(d)
	if err != nil {
		return nil, fmt.Errorf("input: %w", err)
	}
	if ref.Value == nil || !ref.Value.Type.Is(openapi3.TypeObject) {
		return nil, fmt.Errorf("input type %v is not a JSON object; leave the operation out (Options.Operations)", d.Input)
	}
	return json.Marshal(ref.Value)
}

// shutdownPoll is how often Shutdown looks at the calls in progress.
const shutdownPoll = 5 * time.Millisecond

// Shutdown refuses new sessions and waits for the tool calls in progress
// to return and their answers to be written, or for ctx to end. It then
// closes every session, ending their event streams, and cancels the calls
// left. It returns ctx's error when the calls outlived it. Call it before
// the HTTP server's Shutdown: an open event stream would hold that until
// the grace ends.
func (s *Server) Shutdown(ctx context.Context) error {
	s.closed.Store(true)
	var err error
	// A call's answer is written after its handler returned: the POST
	// that carried it ends once the answer is out, and a stdio answer is
	// paid once written. Closing the session before that would lose it.
	if s.busy() {
		t := time.NewTicker(shutdownPoll)
		for s.busy() && err == nil {
			select {
			case <-t.C:
			case <-ctx.Done():
				err = fmt.Errorf("mcpadapter: %d tool calls still running, %d requests unanswered: %w",
					s.pending.Load(), s.posts.Load()+s.owed.Load(), ctx.Err())
			}
		}
		t.Stop()
	}
	s.stop() // cancels the calls left; closing a session does not
	errs := []error{err}
	for ss := range s.srv.Sessions() {
		errs = append(errs, ss.Close())
	}
	return errors.Join(errs...)
}

// busy reports whether a tool call runs or an answer is not written yet.
func (s *Server) busy() bool {
	return s.pending.Load() > 0 || s.posts.Load() > 0 || s.owed.Load() > 0
}

// logCall writes the access log record of one tool call.
func (s *Server) logCall(ctx context.Context, name, session string, start time.Time, code string, unexpected bool, traceID string) {
	level := slog.LevelInfo
	if unexpected {
		level = slog.LevelError
	}
	if !s.logger.Enabled(ctx, level) {
		return
	}
	s.logger.LogAttrs(ctx, level, "mcp call",
		slog.String("operation", name),
		slog.String("session", session),
		slog.String("code", code),
		slog.Float64("durationMs", float64(time.Since(start).Microseconds())/1000),
		slog.String("traceId", traceID))
}
