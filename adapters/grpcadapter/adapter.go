package grpcadapter

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundial-go/sundial/adapters/internal/ratelimit"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/kernel/telemetry"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
)

// Adapter serves a kernel's operations as gRPC methods and runs an
// application's own gRPC methods through the kernel's pipeline. Create it
// with New. It is safe for concurrent use.
//
// Each operation becomes one unary method. Its name follows a convention:
// the service is the proto package (WithPackage) plus the PascalCase of the
// operation ID's first segment, the method is the PascalCase of the rest,
// so orders.create is /shop.v1.Orders/Create and inventory.v2.reserve is
// /shop.v1.Inventory/V2Reserve. A descriptor's GRPCService (a simple name,
// or a fully qualified one in another package) and GRPCMethod override the
// convention. The messages are built from the operation's Go input and
// output types (see docs/grpc.md for the rules), so the one registration
// that serves HTTP and the CLI serves gRPC too, with no generated code.
type Adapter struct {
	k      *kernel.Kernel
	cfg    config
	logger *slog.Logger

	files    *protoregistry.Files // the adapter's files and the well-known types they import
	services []*grpc.ServiceDesc
	methods  map[string]*method // by full method name
	list     []Method

	explicit map[string]*operations.Descriptor // WithMethodOperations
	resolved sync.Map                          // full method -> *operations.Descriptor (nil: none), for the interceptors
	cached   atomic.Int64                      // entries stored in resolved (at most maxResolved)
}

// Method describes one gRPC method served by an Adapter.
type Method struct {
	// FullName is the method's full name, e.g. "/shop.v1.Orders/Create".
	FullName string
	// OperationID is the operation it invokes, e.g. "orders.create".
	OperationID string
	// Input and Output describe its request and response messages.
	Input, Output protoreflect.MessageDescriptor
}

// method is one served operation.
type method struct {
	a       *Adapter
	full    string
	desc    *operations.Descriptor
	in, out *messageCodec
}

// service is the implementation value registered with each ServiceDesc;
// the interceptors recognise the adapter's own methods by it.
type service struct{ a *Adapter }

// New builds the gRPC services of every operation registered with k. It
// fails, naming the operation and the field, when an input or output type
// has no protobuf form (see docs/grpc.md), when two operations map to the
// same method, when a name is not a protobuf identifier, and when an
// option is invalid.
func New(k *kernel.Kernel, opts ...Option) (*Adapter, error) {
	if k == nil {
		return nil, errors.New("grpcadapter: New: nil kernel")
	}
	cfg := defaultConfig()
	for _, o := range opts {
		if o != nil {
			o.apply(&cfg)
		}
	}
	if !isPackage(cfg.pkg) {
		return nil, fmt.Errorf("grpcadapter: WithPackage(%q): want dot-separated protobuf identifiers, e.g. \"shop.v1\"", cfg.pkg)
	}
	a := &Adapter{k: k, cfg: cfg, logger: cfg.logger, methods: make(map[string]*method)}
	if a.logger == nil {
		a.logger = k.Logger()
	}
	if err := a.build(); err != nil {
		return nil, err
	}
	if err := a.buildExplicit(); err != nil {
		return nil, err
	}
	return a, nil
}

// build derives the schema, the files and the service descriptions.
func (a *Adapter) build() error {
	s := newSchema(a.cfg.pkg)
	type svc struct {
		pkg, name string
		methods   []*method
	}
	svcs := make(map[string]*svc) // by full service name
	type named struct {
		d                *operations.Descriptor
		pkg, sname, name string
	}
	var ops []named
	services := map[string]map[string]bool{} // method name -> the services that have one
	for _, d := range a.k.Registry().All() {
		if _, ok := a.k.Lookup(d.ID); !ok {
			continue
		}
		pkg, sname, mname, err := names(a.cfg.pkg, d)
		if err != nil {
			return err
		}
		ops = append(ops, named{d, pkg, sname, mname})
		if services[mname] == nil {
			services[mname] = map[string]bool{}
		}
		services[mname][pkg+"."+sname] = true
	}
	for _, op := range ops {
		d, pkg, sname, mname := op.d, op.pkg, op.sname, op.name
		where := fmt.Sprintf("operation %q", d.ID)
		full := "/" + pkg + "." + sname + "/" + mname
		if other, dup := a.methods[full]; dup {
			return fmt.Errorf("grpcadapter: operations %q and %q both map to method %s; set GRPCService or GRPCMethod on one of them", other.desc.ID, d.ID, full)
		}
		// <Method>Request and <Method>Response, or <Service><Method>…
		// when two services have a method of that name: the two forms
		// buf's RPC_REQUEST_STANDARD_NAME accepts.
		base := mname
		if len(services[mname]) > 1 {
			base = sname + mname
		}
		in, err := s.rpcMessage(d.Input, base+"Request", where+" input")
		if err != nil {
			return err
		}
		out, err := s.rpcMessage(d.Output, base+"Response", where+" output")
		if err != nil {
			return err
		}
		m := &method{a: a, full: full, desc: d, in: in, out: out}
		a.methods[full] = m
		key := pkg + "." + sname
		if svcs[key] == nil {
			svcs[key] = &svc{pkg: pkg, name: sname}
		}
		svcs[key].methods = append(svcs[key].methods, m)
	}

	for key := range svcs {
		if mc := s.byName[strings.TrimPrefix(key, a.cfg.pkg+".")]; mc != nil && mc.full == key {
			return fmt.Errorf("grpcadapter: service %s has the name of the message built from Go type %v; rename the type or set GRPCService on the operations of that service", key, mc.goType)
		}
	}

	// protoc resolves the types of an rpc in the scope of its service
	// first: a method named like a message it uses would hide it.
	for key, sv := range svcs {
		for _, m := range sv.methods {
			for _, mc := range []*messageCodec{m.in, m.out} {
				for _, other := range sv.methods {
					if _, on := splitFull(other.full); on == mc.name {
						return fmt.Errorf("grpcadapter: service %s has a method %s named like the message %s of method %s; set GRPCMethod on one of them", key, on, mc.full, m.full)
					}
				}
			}
		}
	}

	// One file per package: the application package's file holds every
	// message, the others import it.
	a.files = new(protoregistry.Files)
	for _, fd := range []protoreflect.FileDescriptor{
		timestamppb.File_google_protobuf_timestamp_proto,
		durationpb.File_google_protobuf_duration_proto,
		emptypb.File_google_protobuf_empty_proto,
	} {
		if err := a.files.RegisterFile(fd); err != nil {
			return fmt.Errorf("grpcadapter: %w", err)
		}
	}
	fileOf := func(pkg string) string { return strings.ReplaceAll(pkg, ".", "/") + "/operations.proto" }
	mainFile := fileOf(a.cfg.pkg)
	byPkg := map[string]*descriptorpb.FileDescriptorProto{}
	filep := func(pkg string) *descriptorpb.FileDescriptorProto {
		if f, ok := byPkg[pkg]; ok {
			return f
		}
		f := &descriptorpb.FileDescriptorProto{Name: new(fileOf(pkg)), Package: new(pkg), Syntax: new("proto3")}
		if pkg != a.cfg.pkg {
			f.Dependency = append(f.Dependency, mainFile)
		}
		byPkg[pkg] = f
		return f
	}
	mf := filep(a.cfg.pkg)
	mf.MessageType = s.protos
	for dep := range s.deps {
		mf.Dependency = append(mf.Dependency, dep)
	}
	for _, key := range slices.Sorted(maps.Keys(svcs)) {
		sv := svcs[key]
		f := filep(sv.pkg)
		sp := &descriptorpb.ServiceDescriptorProto{Name: new(sv.name)}
		for _, m := range sv.methods {
			for _, mc := range []*messageCodec{m.in, m.out} {
				if mc.empty && !slices.Contains(f.Dependency, fileEmpty) {
					f.Dependency = append(f.Dependency, fileEmpty)
				}
			}
			_, mname := splitFull(m.full)
			sp.Method = append(sp.Method, &descriptorpb.MethodDescriptorProto{
				Name:       new(mname),
				InputType:  new("." + m.in.full),
				OutputType: new("." + m.out.full),
			})
		}
		f.Service = append(f.Service, sp)
	}
	pkgs := slices.Sorted(maps.Keys(byPkg))
	// The main file first: the others import it.
	pkgs = slices.DeleteFunc(pkgs, func(p string) bool { return p == a.cfg.pkg })
	pkgs = append([]string{a.cfg.pkg}, pkgs...)
	for _, pkg := range pkgs {
		fp := byPkg[pkg]
		slices.Sort(fp.Dependency)
		fd, err := protodesc.NewFile(fp, a.files)
		if err != nil {
			return fmt.Errorf("grpcadapter: building %s: %w", fp.GetName(), err)
		}
		if err := a.files.RegisterFile(fd); err != nil {
			return fmt.Errorf("grpcadapter: registering %s: %w", fp.GetName(), err)
		}
	}

	// Link the codecs to their descriptors.
	link := func(mc *messageCodec) error {
		d, err := a.files.FindDescriptorByName(protoreflect.FullName(mc.full))
		if err != nil {
			return fmt.Errorf("grpcadapter: message %s: %w", mc.full, err)
		}
		mc.desc = d.(protoreflect.MessageDescriptor)
		for i := range mc.fields {
			mc.fields[i].fd = mc.desc.Fields().ByNumber(protoreflect.FieldNumber(mc.fields[i].number))
		}
		return nil
	}
	for _, mc := range s.byType {
		if err := link(mc); err != nil {
			return err
		}
	}
	for _, mc := range s.rpcs {
		if err := link(mc); err != nil {
			return err
		}
	}
	if s.empty != nil {
		if err := link(s.empty); err != nil {
			return err
		}
	}

	// Service descriptions for grpc-go.
	for _, key := range slices.Sorted(maps.Keys(svcs)) {
		sv := svcs[key]
		sd := &grpc.ServiceDesc{
			ServiceName: key,
			HandlerType: (*any)(nil),
			Metadata:    fileOf(sv.pkg),
		}
		for _, m := range sv.methods {
			_, mname := splitFull(m.full)
			sd.Methods = append(sd.Methods, grpc.MethodDesc{MethodName: mname, Handler: m.handle})
			a.list = append(a.list, Method{FullName: m.full, OperationID: m.desc.ID, Input: m.in.desc, Output: m.out.desc})
		}
		a.services = append(a.services, sd)
	}
	return nil
}

// names returns the proto package, service and method of d.
func names(pkg string, d *operations.Descriptor) (string, string, string, error) {
	sname, mname := operations.GRPCNames(d.ID)
	if d.GRPCService != "" {
		sname = d.GRPCService
		if i := strings.LastIndexByte(sname, '.'); i >= 0 {
			pkg, sname = sname[:i], sname[i+1:]
			if !isPackage(pkg) {
				return "", "", "", fmt.Errorf("grpcadapter: operation %q: GRPCService %q: package %q is not dot-separated protobuf identifiers", d.ID, d.GRPCService, pkg)
			}
		}
	}
	if d.GRPCMethod != "" {
		mname = d.GRPCMethod
	}
	if !isIdent(sname) {
		return "", "", "", fmt.Errorf("grpcadapter: operation %q: service name %q is not a protobuf identifier", d.ID, sname)
	}
	if !isIdent(mname) {
		return "", "", "", fmt.Errorf("grpcadapter: operation %q: method name %q is not a protobuf identifier", d.ID, mname)
	}
	return pkg, sname, mname, nil
}

func isPackage(p string) bool {
	if p == "" {
		return false
	}
	for seg := range strings.SplitSeq(p, ".") {
		if !isIdent(seg) {
			return false
		}
	}
	return true
}

// splitFull splits "/pkg.Service/Method" into "pkg.Service" and "Method".
func splitFull(full string) (string, string) {
	s, m, _ := strings.Cut(strings.TrimPrefix(full, "/"), "/")
	return s, m
}

// Register registers the adapter's services on s (usually the
// application's *grpc.Server). Call it before s.Serve, once per server.
func (a *Adapter) Register(s grpc.ServiceRegistrar) {
	impl := &service{a: a}
	for _, sd := range a.services {
		s.RegisterService(sd, impl)
	}
}

// Methods returns the methods the adapter serves, sorted by full name.
func (a *Adapter) Methods() []Method {
	out := slices.Clone(a.list)
	slices.SortFunc(out, func(x, y Method) int { return strings.Compare(x.FullName, y.FullName) })
	return out
}

// ServiceNames returns the full names of the adapter's services, sorted,
// e.g. "shop.v1.Orders".
func (a *Adapter) ServiceNames() []string {
	out := make([]string, len(a.services))
	for i, sd := range a.services {
		out[i] = sd.ServiceName
	}
	slices.Sort(out)
	return out
}

// Files returns the adapter's file descriptors (one per proto package,
// plus the well-known types they import). Clients and tools can build
// requests from them with dynamicpb; server reflection serves them.
func (a *Adapter) Files() *protoregistry.Files { return a.files }

// handle is the grpc.MethodDesc handler of one operation.
func (m *method) handle(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
	req := dynamicpb.NewMessage(m.in.desc)
	if err := m.a.receive(dec, req); err != nil {
		if err == errRecvTimeout {
			// The message did not arrive within WithRecvTimeout: the
			// answer closes the stream, which ends the read.
			return nil, m.reject(ctx, pipeline.ErrTimeout())
		}
		// A request that is not valid protobuf is answered with the
		// decoder's own status (grpc-go's Internal, or InvalidArgument for
		// a decoder panic).
		return nil, m.reject(ctx, fromHandler(err))
	}
	if icpt == nil {
		return m.call(ctx, req)
	}
	info := &grpc.UnaryServerInfo{Server: srv, FullMethod: m.full}
	return icpt(ctx, req, info, func(ctx context.Context, req any) (any, error) {
		msg, ok := req.(*dynamicpb.Message)
		if !ok {
			return nil, m.reject(ctx, pipeline.Errorf(pipeline.KindUnexpected, pipeline.CodeUnexpected,
				"grpcadapter: an interceptor replaced the request of %s with %T", m.full, req))
		}
		return m.call(ctx, msg)
	})
}

// reject answers a call the adapter turns away before the pipeline with
// the status of outcome, which the kernel observes as a rejection.
func (m *method) reject(ctx context.Context, outcome error) error {
	start := time.Now()
	o := m.a.invoke(ctx, m.full, kernel.Request{Operation: m.desc.ID, Reject: outcome})
	return m.a.answer(ctx, m.full, o, start)
}

// errRecvTimeout reports a request message that did not arrive within
// WithRecvTimeout.
var errRecvTimeout = errors.New("grpcadapter: request message not received in time")

// receive decodes the request message into req, waiting at most
// WithRecvTimeout for it (see there). dec is grpc-go's, the stream's
// RecvMsg: it returns when the message is complete or the stream's context
// ends, so when the bound fires the decoding goroutine ends as soon as the
// answer closes the stream; req is then never touched again.
func (a *Adapter) receive(dec func(any) error, req *dynamicpb.Message) error {
	d := a.cfg.recvTimeout
	if d <= 0 {
		return decodeRequest(dec, req)
	}
	done := make(chan error, 1)
	go func() { done <- decodeRequest(dec, req) }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		return errRecvTimeout
	}
}

// decodeRequest runs grpc-go's decoder into req. protobuf-go's generic
// (reflective) unmarshal path, the one dynamic messages take, panics on
// some malformed map entries (a key field repeated with another wire
// type); such a panic is a malformed request, not a crash.
func decodeRequest(dec func(any) error, req *dynamicpb.Message) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = status.Errorf(codes.InvalidArgument, "grpcadapter: malformed request message: %v", p)
		}
	}()
	return dec(req)
}

// call converts the request to the operation's input, runs the operation
// through the kernel and converts its outcome to the response.
func (m *method) call(ctx context.Context, req *dynamicpb.Message) (any, error) {
	a := m.a
	start := time.Now()
	r := kernel.Request{Operation: m.desc.ID}
	if in, err := m.decodeInput(req); err != nil {
		r.Reject = err
	} else {
		r.Input = in
	}
	o := a.invoke(ctx, m.full, r)
	var resp any
	if o.Err == nil {
		resp, o.Err = m.encodeOutput(o.Output)
	}
	if err := a.answer(ctx, m.full, o, start); err != nil {
		return nil, err
	}
	return resp, nil
}

// encodeOutput converts the operation's result to the response message.
func (m *method) encodeOutput(v any) (*dynamicpb.Message, error) {
	out := dynamicpb.NewMessage(m.out.desc)
	rv := reflect.ValueOf(v)
	if !rv.IsValid() {
		return out, nil
	}
	if rv.Kind() == reflect.Pointer {
		if rv.IsNil() {
			return out, nil
		}
		rv = rv.Elem()
	}
	if rv.Type() != m.out.goType && !m.out.empty {
		return nil, pipeline.Errorf(pipeline.KindUnexpected, pipeline.CodeUnexpected,
			"grpcadapter: operation %q returned %v, want %v", m.desc.ID, rv.Type(), m.out.goType)
	}
	m.out.encode(rv, out)
	return out, nil
}

// decodeInput converts the request to a new value of the operation's input
// type (a pointer to it, as the handler expects).
func (m *method) decodeInput(req *dynamicpb.Message) (any, error) {
	p := reflect.New(m.desc.Input)
	target := p.Elem()
	if target.Kind() == reflect.Pointer {
		target.Set(reflect.New(target.Type().Elem()))
		target = target.Elem()
	}
	// The operation's input policy: a field number the schema does not
	// have is an unknown field, the same answer as over HTTP and the CLI.
	if !m.desc.InputPolicy.AllowUnknownFields {
		if path := unknownField(req.ProtoReflect(), ""); path != "" {
			return nil, operations.UnknownField(path, "")
		}
	}
	if m.in.empty {
		return p.Interface(), nil
	}
	if err := m.in.decode(req.ProtoReflect(), target); err != nil {
		if fe, ok := errors.AsType[*fieldError](err); ok {
			return nil, pipeline.Errorf(pipeline.KindValidation, pipeline.CodeValidation, "Field '%s': %s.", fe.Path(), fe.msg).
				WithDetail("field", fe.Path())
		}
		return nil, pipeline.Wrap(pipeline.KindValidation, pipeline.CodeValidation, "The request message is invalid.", err)
	}
	return p.Interface(), nil
}

// invoke runs one call, whose server context is ctx, through the kernel:
// r with the protocol, the route (the full method name) and the caller's
// idempotency key filled in, under the invocation's parent context (see
// inbound) carrying the trace context and baggage of the request
// metadata. The kernel returns the outcome by the invocation's deadline,
// whatever the handler does; a call r rejects (r.Reject) runs nothing.
func (a *Adapter) invoke(ctx context.Context, full string, r kernel.Request) kernel.Outcome {
	parent, stop := a.inbound(ctx)
	defer stop()
	md := a.metadata(ctx, r.Operation, full)
	parent = a.extract(parent, md)
	r.Protocol = pipeline.ProtocolGRPC
	if r.Route == "" {
		r.Route = full
	}
	if r.Transport.RPCMethod == "" {
		r.Transport = telemetry.Transport{RPCMethod: full, Status: statusCode}
	}
	if vs := md.Values(mdIdempotencyKey); len(vs) > 0 {
		// A key that is repeated, too long or not printable ASCII is a 400
		// (InvalidArgument) KERNEL_VALIDATION_005 on an operation that takes
		// keys, as over HTTP; an operation that does not ignores it (neither
		// rejected nor passed on as baggage), so that a client sending keys
		// of its own form everywhere is not refused where keys mean nothing.
		if len(vs) > 1 || !pipeline.ValidIdempotencyKey(vs[0]) {
			if r.Reject == nil && a.k.IdempotencyPolicy(r.Operation).Enabled {
				r.Reject = pipeline.ErrIdempotencyKeyMalformed()
			}
		} else {
			r.IdempotencyKey = vs[0]
		}
	}
	return a.k.Handle(parent, r)
}

// statusCode is the gRPC code the outcome err (nil: success) is answered
// with, as a number (telemetry.Transport.Status).
func statusCode(err error) int {
	if err == nil {
		return int(codes.OK)
	}
	e := pipeline.AsError(err)
	if hs, ok := e.Unwrap().(*handlerStatus); ok && hs != nil {
		return int(hs.st.Code())
	}
	return int(CodeFor(e.Kind()))
}

// answer writes the call log record of one call and returns the status
// error of its outcome (nil on success).
func (a *Adapter) answer(ctx context.Context, full string, o kernel.Outcome, start time.Time) error {
	st := Status(o.Err, a.cfg.domain)
	a.logCall(ctx, full, o, st, start)
	if q, ok := o.Invocation.Quota(); ok {
		// RateLimitHeaders: the same facts as the HTTP fields, as header
		// metadata (sent with the response or the status).
		_ = grpc.SetHeader(ctx, metadata.Pairs(ratelimit.PolicyField, ratelimit.Policy(q), ratelimit.Field, ratelimit.Current(q)))
	}
	if o.Invocation.Replayed() {
		// The stored outcome of an earlier call with the same
		// idempotency-key (docs/idempotency.md).
		_ = grpc.SetHeader(ctx, metadata.Pairs(MetadataIdempotentReplayed, "true"))
	}
	if st != nil && o.TraceID != "" {
		// A failure names its trace, as an HTTP problem's traceId does.
		_ = grpc.SetTrailer(ctx, metadata.Pairs(MetadataTraceID, o.TraceID))
	}
	return st.Err()
}

// MetadataTraceID is the trailer key under which a failed call's trace ID
// goes back to the client (as an HTTP problem's "traceId" does).
const MetadataTraceID = "sundial-trace-id"

// inbound returns the invocation's parent context for a call whose server
// context is ctx. The kernel reads the caller's deadline from it.
//
// Without a deadline the parent is ctx itself. With one, the parent keeps
// ctx's values but not its cancellation: when ctx ends, the parent ends
// with a cause that says which token fired — the deadline when ctx's own
// deadline fired or when the cancellation arrived no earlier than the
// tolerance before the deadline (a client's deadline timer, seen from the
// server), the caller's cancellation otherwise. The kernel attributes the
// outcome from that cause. stop releases the parent; call it once the
// kernel has answered.
func (a *Adapter) inbound(ctx context.Context) (parent context.Context, stop func()) {
	d, ok := ctx.Deadline()
	if !ok {
		return ctx, func() {}
	}
	base, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	withDeadline, cancelDeadline := context.WithDeadline(base, d)
	tolerance := a.cfg.tolerance
	after := context.AfterFunc(ctx, func() {
		if ctx.Err() == context.DeadlineExceeded || !time.Now().Before(d.Add(-tolerance)) {
			cancel(errCallerDeadline)
			return
		}
		cancel(context.Cause(ctx))
	})
	return withDeadline, func() {
		after()
		cancelDeadline()
		cancel(nil)
	}
}

// errCallerDeadline is the cause of a parent context ended by the
// caller's deadline. It wraps context.DeadlineExceeded, which is what the
// kernel attributes as TIMEOUT.
var errCallerDeadline = fmt.Errorf("grpcadapter: the caller's deadline passed: %w", context.DeadlineExceeded)

// Metadata keys the adapter reads.
const (
	mdBaggage        = "baggage"
	mdIdempotencyKey = "idempotency-key"
	// MetadataIdempotentReplayed is the header metadata that marks a
	// replayed outcome: "true".
	MetadataIdempotentReplayed = "idempotent-replayed"
)

// incomingMD reads the incoming metadata of a server context key by key,
// as a propagation.TextMapCarrier for Extract: on every call
// metadata.FromIncomingContext copies every key and value, which costs
// more than the rest of the adapter's per-call work; a call reads only a
// few keys, most of them absent. With noBaggage set it hides the baggage
// metadata.
type incomingMD struct {
	ctx       context.Context
	noBaggage bool
}

// Values returns the values of key (propagation.ValuesGetter: the W3C
// baggage propagator reads every baggage value through it).
func (m incomingMD) Values(key string) []string {
	if m.noBaggage && key == mdBaggage {
		return nil
	}
	return metadata.ValueFromIncomingContext(m.ctx, key)
}

func (m incomingMD) Get(key string) string {
	if vs := m.Values(key); len(vs) > 0 {
		return vs[0]
	}
	return ""
}

// Set does nothing: Extract only reads.
func (incomingMD) Set(string, string) {}

func (m incomingMD) Keys() []string {
	md, _ := metadata.FromIncomingContext(m.ctx)
	keys := make([]string, 0, len(md))
	for k := range md {
		if !m.noBaggage || k != mdBaggage {
			keys = append(keys, k)
		}
	}
	return keys
}

// metadata returns the incoming metadata of the server context ctx as a
// carrier, with baggage over the WithBaggageLimit hidden (and a warning
// logged).
func (a *Adapter) metadata(ctx context.Context, op, full string) incomingMD {
	md := incomingMD{ctx: ctx}
	if vs := md.Values(mdBaggage); len(vs) > 0 {
		size := 0
		for _, v := range vs {
			size += len(v)
		}
		if size > a.cfg.baggageLimit {
			md.noBaggage = true
			a.logger.LogAttrs(ctx, slog.LevelWarn, "grpcadapter: baggage metadata dropped",
				slog.String("operation", cmp.Or(op, full)), slog.Int("bytes", size), slog.Int("limit", a.cfg.baggageLimit))
		}
	}
	return md
}

// extract returns parent carrying the W3C baggage of md, which the kernel
// copies into the invocation, and what the propagator extracts from it
// (by default the W3C trace context, which the invocation's span
// continues).
func (a *Adapter) extract(parent context.Context, md incomingMD) context.Context {
	if a.cfg.defaultPropagator {
		return telemetry.Propagator().Extract(parent, md) // trace context and baggage
	}
	parent = propagation.Baggage{}.Extract(parent, md)
	if p := a.cfg.propagator; p != nil {
		parent = p.Extract(parent, md)
	}
	return parent
}

// logCall writes the call log record of one call, answered with status st:
// Info, or Error for an UNEXPECTED outcome (whose internal text is logged,
// never sent).
func (a *Adapter) logCall(ctx context.Context, full string, o kernel.Outcome, st *status.Status, start time.Time) {
	kind := pipeline.KindOf(o.Err)
	level := slog.LevelInfo
	if kind == pipeline.KindUnexpected {
		level = slog.LevelError
	}
	if !a.logger.Enabled(ctx, level) {
		return
	}
	attrs := make([]slog.Attr, 0, 7)
	attrs = append(attrs,
		slog.String("operation", cmp.Or(o.Invocation.Name(), full)),
		slog.String("method", full),
		slog.String("grpcCode", st.Code().String()),
		slog.String("code", pipeline.CodeOf(o.Err)),
		slog.Float64("durationMs", float64(time.Since(start).Microseconds())/1000),
		slog.String("traceId", o.TraceID),
	)
	if kind == pipeline.KindUnexpected {
		attrs = append(attrs, slog.String("error", pipeline.ErrorText(o.Err)))
	}
	a.logger.LogAttrs(ctx, level, "grpc call", attrs...)
}

// unknownField returns the path of the first field of msg (or of a message
// in it) whose number its descriptor does not have — "#7",
// "lines[1].#7" — or "".
func unknownField(msg protoreflect.Message, path string) string {
	if raw := msg.GetUnknown(); len(raw) > 0 {
		if num, _, n := protowire.ConsumeTag(raw); n > 0 {
			return joinPath(path, "#"+strconv.Itoa(int(num)))
		}
		return joinPath(path, "#?")
	}
	var found string
	msg.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		name := joinPath(path, fd.JSONName())
		switch {
		case fd.IsList() && fd.Message() != nil:
			l := v.List()
			for i := range l.Len() {
				if found = unknownField(l.Get(i).Message(), name+"["+strconv.Itoa(i)+"]"); found != "" {
					return false
				}
			}
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				found = unknownField(mv.Message(), joinPath(name, k.String()))
				return found == ""
			})
		case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
			found = unknownField(v.Message(), name)
		}
		return found == ""
	})
	return found
}

func joinPath(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}
