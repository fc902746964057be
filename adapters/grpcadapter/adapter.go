package grpcadapter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"

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
	for _, d := range a.k.Registry().All() {
		if _, ok := a.k.Lookup(d.ID); !ok {
			continue
		}
		where := fmt.Sprintf("operation %q", d.ID)
		pkg, sname, mname, err := names(a.cfg.pkg, d)
		if err != nil {
			return err
		}
		full := "/" + pkg + "." + sname + "/" + mname
		if other, dup := a.methods[full]; dup {
			return fmt.Errorf("grpcadapter: operations %q and %q both map to method %s; set GRPCService or GRPCMethod on one of them", other.desc.ID, d.ID, full)
		}
		in, err := s.topMessage(d.Input, sname+mname+"Request", where+" input")
		if err != nil {
			return err
		}
		out, err := s.topMessage(d.Output, sname+mname+"Response", where+" output")
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
	sname := operations.PascalCase(operations.Group(d.ID))
	if d.GRPCService != "" {
		sname = d.GRPCService
		if i := strings.LastIndexByte(sname, '.'); i >= 0 {
			pkg, sname = sname[:i], sname[i+1:]
			if !isPackage(pkg) {
				return "", "", "", fmt.Errorf("grpcadapter: operation %q: GRPCService %q: package %q is not dot-separated protobuf identifiers", d.ID, d.GRPCService, pkg)
			}
		}
	}
	mname := operations.PascalCase(operations.Name(d.ID))
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
	if err := decodeRequest(dec, req); err != nil {
		// For a malformed message grpc-go has already answered (Internal)
		// with a status of its own; what is returned here is then only
		// logged by it.
		m.a.logger.LogAttrs(ctx, slog.LevelInfo, "grpc call",
			slog.String("operation", m.desc.ID),
			slog.String("method", m.full),
			slog.String("grpcCode", status.Code(err).String()),
			slog.String("code", ""),
			slog.String("error", err.Error()))
		return nil, err
	}
	if icpt == nil {
		return m.call(ctx, req)
	}
	info := &grpc.UnaryServerInfo{Server: srv, FullMethod: m.full}
	return icpt(ctx, req, info, func(ctx context.Context, req any) (any, error) {
		msg, ok := req.(*dynamicpb.Message)
		if !ok {
			return nil, Status(pipeline.Errorf(pipeline.KindUnexpected, pipeline.CodeUnexpected,
				"grpcadapter: an interceptor replaced the request of %s with %T", m.full, req), m.a.cfg.domain).Err()
		}
		return m.call(ctx, msg)
	})
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

// call decodes the request, invokes the operation and encodes the
// outcome.
func (m *method) call(ctx context.Context, req *dynamicpb.Message) (any, error) {
	a := m.a
	start := time.Now()
	in, err := m.decodeInput(req)
	if err != nil {
		a.logCall(ctx, m.full, m.desc.ID, err, start, "")
		return nil, Status(err, a.cfg.domain).Err()
	}
	parent, deadline, stop := a.inbound(ctx)
	defer stop()
	inv := pipeline.NewInvocation(parent, m.desc, in)
	inv.SetProtocol(pipeline.ProtocolGRPC)
	inv.SetDeadline(deadline)
	a.setBaggage(ctx, inv)
	err = a.k.Invoke(inv)
	a.logCall(ctx, m.full, m.desc.ID, err, start, inv.TraceID())
	if err != nil {
		return nil, Status(err, a.cfg.domain).Err()
	}
	out := dynamicpb.NewMessage(m.out.desc)
	if v := reflect.ValueOf(inv.Output()); v.IsValid() {
		if v.Kind() == reflect.Pointer {
			if v.IsNil() {
				return out, nil
			}
			v = v.Elem()
		}
		if v.Type() != m.out.goType && !m.out.empty {
			err := pipeline.Errorf(pipeline.KindUnexpected, pipeline.CodeUnexpected,
				"grpcadapter: operation %q returned %v, want %v", m.desc.ID, v.Type(), m.out.goType)
			a.logger.LogAttrs(ctx, slog.LevelError, "grpcadapter: output dropped", slog.String("operation", m.desc.ID), slog.String("error", err.Error()))
			return nil, Status(err, a.cfg.domain).Err()
		}
		m.out.encode(v, out)
	}
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
	if m.in.empty {
		return p.Interface(), nil
	}
	if err := m.in.decode(req.ProtoReflect(), target); err != nil {
		var fe *fieldError
		if errors.As(err, &fe) {
			return nil, pipeline.Errorf(pipeline.KindValidation, pipeline.CodeValidation, "Field '%s': %s.", fe.Path(), fe.msg).
				WithDetail("field", fe.Path())
		}
		return nil, pipeline.Wrap(pipeline.KindValidation, pipeline.CodeValidation, "The request message is invalid.", err)
	}
	return p.Interface(), nil
}

// inbound returns the invocation's parent context and deadline for a call
// whose server context is ctx.
//
// Without a deadline the parent is ctx itself. With one, the parent keeps
// ctx's values but not its cancellation: when ctx ends, the parent ends
// with a cause that says which token fired — the deadline when ctx's own
// deadline fired or when the cancellation arrived no earlier than the
// tolerance before the deadline (a client's deadline timer, seen from the
// server), the caller's cancellation otherwise. The DeadlineMiddleware
// attributes the outcome from that cause. stop releases the parent; call
// it when the invocation has returned.
func (a *Adapter) inbound(ctx context.Context) (parent context.Context, deadline time.Time, stop func()) {
	d, ok := ctx.Deadline()
	if !ok {
		return ctx, time.Time{}, func() {}
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
	return withDeadline, d, func() {
		after()
		cancelDeadline()
		cancel(nil)
	}
}

// errCallerDeadline is the cause of a parent context ended by the
// caller's deadline. It wraps context.DeadlineExceeded, which is what the
// DeadlineMiddleware looks for.
var errCallerDeadline = fmt.Errorf("grpcadapter: the caller's deadline passed: %w", context.DeadlineExceeded)

// incomingMD reads the incoming metadata of a server context key by key,
// as a propagation.TextMapCarrier for Extract: on every call
// metadata.FromIncomingContext copies every key and value, which costs
// more than the rest of the adapter's per-call work; a call reads only a
// few keys, most of them absent.
type incomingMD struct{ ctx context.Context }

func (m incomingMD) values(key string) []string { return metadata.ValueFromIncomingContext(m.ctx, key) }

func (m incomingMD) Get(key string) string {
	if vs := m.values(key); len(vs) > 0 {
		return vs[0]
	}
	return ""
}

// Set does nothing: Extract only reads.
func (incomingMD) Set(string, string) {}

func (m incomingMD) Keys() []string {
	md, _ := metadata.FromIncomingContext(m.ctx)
	return mdCarrier(md).Keys()
}

// mdCarrier reads gRPC metadata as a propagation.TextMapCarrier.
type mdCarrier metadata.MD

func (c mdCarrier) Get(key string) string {
	if v := metadata.MD(c).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}
func (c mdCarrier) Set(key, value string) { metadata.MD(c).Set(key, value) }
func (c mdCarrier) Keys() []string {
	out := make([]string, 0, len(c))
	for k := range c {
		out = append(out, k)
	}
	return out
}

// setBaggage copies the W3C "baggage" metadata and "idempotency-key" into
// the invocation's baggage, and extracts trace context when a propagator
// is configured.
func (a *Adapter) setBaggage(ctx context.Context, inv *pipeline.Invocation) {
	md := incomingMD{ctx}
	if a.cfg.propagator != nil {
		inv.SetContext(a.cfg.propagator.Extract(inv.Context(), md))
	}
	if vs := md.values("baggage"); len(vs) > 0 {
		size := 0
		for _, v := range vs {
			size += len(v)
		}
		if size > a.cfg.baggageLimit {
			a.logger.LogAttrs(ctx, slog.LevelWarn, "grpcadapter: baggage metadata dropped",
				slog.String("operation", inv.Name()), slog.Int("bytes", size), slog.Int("limit", a.cfg.baggageLimit))
		} else {
			b, err := baggage.Parse(strings.Join(vs, ","))
			// Bounded copy (telemetry.MaxBaggageMembers/Bytes), logged.
			telemetry.CopyBaggage(baggage.ContextWithBaggage(ctx, b), inv, a.logger)
			if err != nil {
				a.logger.LogAttrs(ctx, slog.LevelDebug, "grpcadapter: baggage metadata partly invalid",
					slog.String("operation", inv.Name()), slog.String("error", err.Error()))
			}
		}
	}
	if vs := md.values("idempotency-key"); len(vs) > 0 && vs[0] != "" && len(vs[0]) <= maxIdempotencyKey {
		inv.SetBaggage(pipeline.BaggageIdempotencyKey, vs[0])
	}
}

// logCall writes the call log record of one call: Info, or Error for an
// UNEXPECTED outcome (whose internal text is logged, never sent).
func (a *Adapter) logCall(ctx context.Context, full, name string, err error, start time.Time, traceID string) {
	kind := pipeline.KindOf(err)
	level := slog.LevelInfo
	if kind == pipeline.KindUnexpected {
		level = slog.LevelError
	}
	if !a.logger.Enabled(ctx, level) {
		return
	}
	if traceID == "" {
		if sc := trace.SpanContextFromContext(ctx); sc.HasTraceID() {
			traceID = sc.TraceID().String()
		}
	}
	attrs := make([]slog.Attr, 0, 8)
	attrs = append(attrs,
		slog.String("operation", name),
		slog.String("method", full),
		slog.String("grpcCode", CodeFor(kind).String()),
		slog.String("code", pipeline.CodeOf(err)),
		slog.Float64("durationMs", float64(time.Since(start).Microseconds())/1000),
		slog.String("traceId", traceID),
	)
	if kind == pipeline.KindUnexpected {
		attrs = append(attrs, slog.String("error", err.Error()))
	}
	a.logger.LogAttrs(ctx, level, "grpc call", attrs...)
}
