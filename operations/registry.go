package operations

import (
	"context"
	"fmt"
	"net/http"
	"reflect"
	"sort"
	"strings"
	"sync"

	"github.com/sundial-go/sundial/pipeline"
)

// Descriptor describes one operation: its ID, what it does, and how each
// protocol reaches it. Fields an adapter does not need may stay zero: an
// operation without Method and Path is not mounted over HTTP but is still
// reachable over gRPC, the CLI and in-process.
type Descriptor struct {
	// ID is the operation ID (see ValidateID), e.g. "orders.create".
	ID string
	// Summary is a one-line description (CLI help, reflection, docs).
	Summary string
	// Method and Path mount the operation over HTTP, e.g. "POST" and
	// "/orders" or "GET" and "/orders/:id" (echo path syntax).
	Method string
	Path   string
	// SuccessStatus overrides the HTTP status of a success. Zero means the
	// adapter's default: 201 for an ID ending in ".create", 204 when the
	// output type is struct{}, 200 otherwise.
	SuccessStatus int
	// Idempotent says whether repeating the call is harmless. It informs
	// clients and retry helpers; it changes nothing in the pipeline.
	Idempotent bool
	// GRPCService and GRPCMethod override the gRPC method name. Empty means
	// the convention ([GRPCNames]): service = the application's proto
	// package + "." + the first segment in PascalCase, method = the rest in
	// PascalCase.
	GRPCService string
	GRPCMethod  string
	// InputPolicy says how strictly the input is read, on every protocol
	// (see InputPolicy); the zero value rejects unknown fields and keys
	// whose case differs from the field's.
	InputPolicy InputPolicy

	// Input and Output are the operation's message types, filled in by
	// Register.
	Input  reflect.Type
	Output reflect.Type

	handler pipeline.Handler
	stream  StreamHandler // a streaming operation's handler; nil for a unary one
	kind    Kind
	rules   *ruleSet // the registry's rules when registered; nil: the built-in ones
}

// ruleSet returns the rules d's constraints are checked with.
func (d *Descriptor) ruleSet() *ruleSet {
	if d == nil || d.rules == nil {
		return defaultRules
	}
	return d.rules
}

// OperationID returns d.ID; it makes *Descriptor a pipeline.Operation.
func (d *Descriptor) OperationID() string { return d.ID }

// Handler returns the terminal handler that calls the registered function
// with the handler's context and the invocation's input, and returns its
// result.
func (d *Descriptor) Handler() pipeline.Handler { return d.handler }

// NewInput returns a pointer to a new zero value of the input type, ready
// for a decoder to fill.
func (d *Descriptor) NewInput() any { return reflect.New(d.Input).Interface() }

// Validator is implemented by inputs that can check themselves. The
// kernel's built-in Validation-stage middleware calls Validate before the
// handler; a non-nil error that is not already a *pipeline.Error becomes a
// VALIDATION outcome with its text as the message.
type Validator interface {
	Validate() error
}

// Registry holds the registered operations. Its zero value is not usable;
// call NewRegistry. It is safe for concurrent use, but registration is
// expected to finish before a kernel is built from it.
type Registry struct {
	mu    sync.RWMutex // guards byID and rules
	byID  map[string]*Descriptor
	rules *ruleSet // nil: the built-in rules (defaultRules)
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{byID: make(map[string]*Descriptor)} }

// Register adds an operation whose handler is fn. The input type In is
// decoded by the adapters (JSON over HTTP and the CLI, protobuf over gRPC);
// Out is encoded back. It returns an error naming the ID when the ID is
// malformed or already registered, when fn is nil, or when only one of
// Method and Path is set.
func Register[In, Out any](r *Registry, d Descriptor, fn func(context.Context, In) (Out, error)) error {
	if err := prepare[In, Out](r, &d, Unary, fn == nil); err != nil {
		return err
	}
	d.handler = handlerOf(d.ID, d.Input, fn)
	return r.add(d)
}

// prepare checks d's registration as an operation of kind k. noFn says
// its handler function is nil. It fills in d's kind, types and rules.
func prepare[In, Out any](r *Registry, d *Descriptor, k Kind, noFn bool) error {
	if r == nil {
		return fmt.Errorf("operations: Register %q: nil registry", d.ID)
	}
	if err := ValidateID(d.ID); err != nil {
		return err
	}
	if noFn {
		return fmt.Errorf("operations: Register %q: nil handler function", d.ID)
	}
	if err := checkHTTP(d); err != nil {
		return err
	}
	d.kind = k
	d.Input = reflect.TypeFor[In]()
	d.Output = reflect.TypeFor[Out]()
	d.rules = r.ruleSet()
	if err := compileConstraints(d.rules, d.Input); err != nil {
		return fmt.Errorf("operations: Register %q: input %v: %w", d.ID, d.Input, err)
	}
	return nil
}

// checkHTTP checks d's HTTP mounting (Method with Path, a supported
// method, a rooted path, a 2xx SuccessStatus) and upper-cases its method.
func checkHTTP(d *Descriptor) error {
	if (d.Method == "") != (d.Path == "") {
		return fmt.Errorf("operations: Register %q: Method and Path must be set together (got Method=%q, Path=%q)", d.ID, d.Method, d.Path)
	}
	if d.Method != "" {
		d.Method = strings.ToUpper(d.Method)
		switch d.Method {
		case http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
		default:
			return fmt.Errorf("operations: Register %q: unsupported HTTP method %q", d.ID, d.Method)
		}
		if !strings.HasPrefix(d.Path, "/") {
			return fmt.Errorf("operations: Register %q: HTTP path %q must start with '/'", d.ID, d.Path)
		}
	}
	if d.SuccessStatus != 0 && (d.SuccessStatus < 200 || d.SuccessStatus > 299) {
		return fmt.Errorf("operations: Register %q: SuccessStatus %d is not a 2xx status", d.ID, d.SuccessStatus)
	}
	return nil
}

// handlerOf returns the terminal handler of operation id: it calls fn
// with the invocation's input (of type inType: an In or a *In; none is
// In's zero value) and returns its result.
func handlerOf[In, Out any](id string, inType reflect.Type, fn func(context.Context, In) (Out, error)) pipeline.Handler {
	return func(ctx context.Context, inv *pipeline.Invocation) (any, error) {
		in, err := inputOf[In](id, inType, inv.Input())
		if err != nil {
			return nil, err
		}
		out, err := fn(ctx, in)
		if err != nil {
			return nil, statusOutcome(err)
		}
		return out, nil
	}
}

// inputOf returns the input v of operation id as an In. v is an In or a
// *In, of type inType; nil gives In's zero value.
func inputOf[In any](id string, inType reflect.Type, v any) (In, error) {
	var in In
	switch v := v.(type) {
	case *In:
		if v != nil {
			in = *v
		}
	case In:
		in = v
	case nil:
	default:
		return in, pipeline.NewError(pipeline.KindUnexpected, pipeline.CodeUnexpected,
			fmt.Sprintf("operation %q: input of type %T, want %v", id, v, inType))
	}
	return in, nil
}

// add adds a copy of d (the registry owns its descriptor), unless its ID
// is registered already.
func (r *Registry) add(d Descriptor) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.byID[d.ID]; dup {
		return fmt.Errorf("operations: operation %q is already registered", d.ID)
	}
	r.byID[d.ID] = &d
	return nil
}

// Lookup returns the descriptor registered under id.
func (r *Registry) Lookup(id string) (*Descriptor, bool) {
	r.mu.RLock()
	d, ok := r.byID[id]
	r.mu.RUnlock()
	return d, ok
}

// All returns every descriptor, sorted by ID.
func (r *Registry) All() []*Descriptor {
	r.mu.RLock()
	out := make([]*Descriptor, 0, len(r.byID))
	for _, d := range r.byID {
		out = append(out, d)
	}
	r.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}
