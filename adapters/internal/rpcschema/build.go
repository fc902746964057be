// Package rpcschema builds the protobuf form of a kernel's operations:
// message descriptors derived from their Go types, one file per proto
// package, and per method the converters between Go values and dynamic
// messages. The gRPC and Connect adapters serve the methods it builds.
package rpcschema

import (
	"fmt"
	"go/token"
	"maps"
	"regexp"
	"slices"
	"strings"

	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
)

// Set is the protobuf form of a kernel's operations.
type Set struct {
	// Files holds the files of the methods and the well-known types they
	// import.
	Files *protoregistry.Files
	// Services are the services, sorted by full name.
	Services []*Service

	pkg     string
	methods map[string]*Method // by full method name
}

// Service is one service of a Set.
type Service struct {
	// Full is the service's full name: "shop.v1.Orders".
	Full string
	// File is the name of the proto file that declares it.
	File string
	// Methods are its methods, in the order of registration.
	Methods []*Method

	pkg, name string
}

// Method is one operation as a protobuf method.
type Method struct {
	// Full is the method's full name: "/shop.v1.Orders/Create".
	Full string
	// Name is the method's simple name: "Create".
	Name string
	// Op is the operation's handle; nil in a client's Set.
	Op *kernel.Op
	// Desc is the operation's descriptor.
	Desc *operations.Descriptor
	// RPC describes the method, its request and its response.
	RPC protoreflect.MethodDescriptor

	in, out *messageCodec
}

// Input describes the method's request message.
func (m *Method) Input() protoreflect.MessageDescriptor { return m.in.desc }

// Output describes the method's response message.
func (m *Method) Output() protoreflect.MessageDescriptor { return m.out.desc }

// Build builds the methods of ops in the proto package pkg ("sundial.v1"),
// with the files' go_package under goPrefix ("": none). It fails, naming
// the operation and the field, when a type has no protobuf form. It fails
// too when two operations map to one method, or a name is not a protobuf
// identifier. Its errors have no prefix: the caller adds its own.
func Build(ops []*kernel.Op, pkg, goPrefix string) (*Set, error) {
	ds := make([]*operations.Descriptor, len(ops))
	for i, op := range ops {
		ds[i] = op.Descriptor()
	}
	return build(ds, ops, pkg, goPrefix)
}

// BuildClient is Build for a client: the methods of the operations ds,
// whose Op is nil.
func BuildClient(ds []*operations.Descriptor, pkg string) (*Set, error) {
	return build(ds, nil, pkg, "")
}

// build builds the methods of ds; ops, when not nil, are their handles.
func build(ds []*operations.Descriptor, ops []*kernel.Op, pkg, goPrefix string) (*Set, error) {
	if !isPackage(pkg) {
		return nil, fmt.Errorf("WithPackage(%q): want dot-separated protobuf identifiers, e.g. \"shop.v1\"", pkg)
	}
	if goPrefix != "" && !isImportPath(goPrefix) {
		return nil, fmt.Errorf("WithGoPackagePrefix(%q): want a Go import path, e.g. \"example.com/shop/gen\"", goPrefix)
	}
	set := &Set{pkg: pkg, methods: make(map[string]*Method)}
	s := newSchema(pkg)
	named, err := nameOperations(ds, ops, pkg)
	if err != nil {
		return nil, err
	}
	svcs, err := set.buildMethods(s, named)
	if err != nil {
		return nil, err
	}
	if err := set.checkServiceNames(s, svcs); err != nil {
		return nil, err
	}
	if err := checkMethodNames(svcs); err != nil {
		return nil, err
	}
	if err := set.buildFiles(s, svcs, goPrefix); err != nil {
		return nil, err
	}
	if err := set.linkCodecs(s); err != nil {
		return nil, err
	}
	for _, key := range slices.Sorted(maps.Keys(svcs)) {
		set.Services = append(set.Services, svcs[key])
	}
	return set, nil
}

// Method returns the method of full name full, or nil.
func (set *Set) Method(full string) *Method { return set.methods[full] }

// Methods returns every method, sorted by full name.
func (set *Set) Methods() []*Method {
	return slices.SortedFunc(maps.Values(set.methods), func(x, y *Method) int { return strings.Compare(x.Full, y.Full) })
}

// MethodOf returns the method of the operation id, or nil.
func (set *Set) MethodOf(id string) *Method {
	for _, m := range set.methods {
		if m.Desc.ID == id {
			return m
		}
	}
	return nil
}

// namedOp is one served operation with the names of its method.
type namedOp struct {
	op               *kernel.Op
	d                *operations.Descriptor
	pkg, sname, name string
}

// nameOperations returns the operations ds, each with its handle (ops[i];
// nil when ops is) and the names of its method in the package pkg.
func nameOperations(ds []*operations.Descriptor, ops []*kernel.Op, pkg string) ([]namedOp, error) {
	named := make([]namedOp, 0, len(ds))
	for i, d := range ds {
		p, sname, mname, err := names(pkg, d)
		if err != nil {
			return nil, err
		}
		var op *kernel.Op
		if ops != nil {
			op = ops[i]
		}
		named = append(named, namedOp{op, d, p, sname, mname})
	}
	return named, nil
}

// servicesByMethod returns, for each method name, the full names of the
// services that have a method of that name.
func servicesByMethod(ops []namedOp) map[string]map[string]bool {
	services := map[string]map[string]bool{}
	for _, op := range ops {
		if services[op.name] == nil {
			services[op.name] = map[string]bool{}
		}
		services[op.name][op.pkg+"."+op.sname] = true
	}
	return services
}

// buildMethods builds the method of each operation, with its request and
// response messages, and groups them by full service name.
func (set *Set) buildMethods(s *schema, ops []namedOp) (map[string]*Service, error) {
	services := servicesByMethod(ops)
	svcs := make(map[string]*Service) // by full service name
	for _, op := range ops {
		d, pkg, sname, mname := op.d, op.pkg, op.sname, op.name
		where := fmt.Sprintf("operation %q", d.ID)
		full := "/" + pkg + "." + sname + "/" + mname
		if other, dup := set.methods[full]; dup {
			return nil, fmt.Errorf("operations %q and %q both map to method %s; set GRPCService or GRPCMethod on one of them", other.Desc.ID, d.ID, full)
		}
		// <Method>Request and <Method>Response, or <Service><Method>…
		// when two services have a method of that name: the two forms
		// buf's RPC_REQUEST_STANDARD_NAME accepts.
		base := mname
		if len(services[mname]) > 1 {
			base = sname + mname
		}
		s.rules = d
		in, err := s.rpcMessage(d.Input, base+"Request", where+" input")
		if err != nil {
			return nil, err
		}
		out, err := s.rpcMessage(d.Output, base+"Response", where+" output")
		if err != nil {
			return nil, err
		}
		m := &Method{Full: full, Name: mname, Op: op.op, Desc: d, in: in, out: out}
		set.methods[full] = m
		key := pkg + "." + sname
		if svcs[key] == nil {
			svcs[key] = &Service{Full: key, File: fileOf(pkg), pkg: pkg, name: sname}
		}
		svcs[key].Methods = append(svcs[key].Methods, m)
	}
	return svcs, nil
}

// checkServiceNames rejects a service named like a message of the
// application package.
func (set *Set) checkServiceNames(s *schema, svcs map[string]*Service) error {
	for key := range svcs {
		if mc := s.byName[strings.TrimPrefix(key, set.pkg+".")]; mc != nil && mc.full == key {
			return fmt.Errorf("service %s has the name of the message built from Go type %v; rename the type or set GRPCService on the operations of that service", key, mc.goType)
		}
	}
	return nil
}

// checkMethodNames rejects a method named like a message its service
// uses: protoc resolves the types of an rpc in the scope of its service
// first, so the method would hide the message.
func checkMethodNames(svcs map[string]*Service) error {
	for key, sv := range svcs {
		for _, m := range sv.Methods {
			for _, mc := range []*messageCodec{m.in, m.out} {
				if on, ok := sv.methodNamed(mc.name); ok {
					return fmt.Errorf("service %s has a method %s named like the message %s of method %s; set GRPCMethod on one of them", key, on, mc.full, m.Full)
				}
			}
		}
	}
	return nil
}

// methodNamed reports whether the service has a method called name.
func (sv *Service) methodNamed(name string) (string, bool) {
	for _, other := range sv.Methods {
		if other.Name == name {
			return other.Name, true
		}
	}
	return "", false
}

// fileOf is the name of the proto file of package pkg.
func fileOf(pkg string) string { return strings.ReplaceAll(pkg, ".", "/") + "/operations.proto" }

// buildFiles builds and registers one file per package: the application
// package's file holds every message, the others import it.
func (set *Set) buildFiles(s *schema, svcs map[string]*Service, goPrefix string) error {
	set.Files = new(protoregistry.Files)
	if err := registerWellKnown(set.Files); err != nil {
		return err
	}
	fb := fileBuild{main: set.pkg, goPrefix: goPrefix, byPkg: map[string]*descriptorpb.FileDescriptorProto{}}
	mf := fb.file(set.pkg)
	mf.MessageType = s.protos
	if len(s.locs) > 0 {
		mf.SourceCodeInfo = &descriptorpb.SourceCodeInfo{Location: s.locs}
	}
	for dep := range s.deps {
		mf.Dependency = append(mf.Dependency, dep)
	}
	for _, key := range slices.Sorted(maps.Keys(svcs)) {
		fb.addService(svcs[key])
	}
	return fb.register(set.Files)
}

// goPackage is the go_package of the file of proto package pkg under
// prefix, as buf's managed mode names it. The import path is prefix and
// the package's directory. The name is its last element. When the last is
// a version, it comes after the one before it: "shop.v1" is shopv1.
func goPackage(prefix, pkg string) string {
	elems := strings.Split(strings.ToLower(pkg), ".")
	name := elems[len(elems)-1]
	if len(elems) > 1 && protoVersion.MatchString(name) {
		name = elems[len(elems)-2] + name
	}
	name = strings.ReplaceAll(name, "_", "")
	if token.IsKeyword(name) || name == "" {
		name += "pb"
	}
	return prefix + "/" + strings.ReplaceAll(pkg, ".", "/") + ";" + name
}

// protoVersion matches a proto package's version element: v1, v2beta1.
var protoVersion = regexp.MustCompile(`^v[0-9]+((alpha|beta)[0-9]*)?$`)

// isImportPath reports whether p is a Go import path: non-empty elements
// separated by '/', of letters, digits and "-._~+", none "." or "..".
func isImportPath(p string) bool {
	for _, e := range strings.Split(p, "/") {
		if e == "" || e == "." || e == ".." || strings.TrimLeft(e, importPathChars) != "" {
			return false
		}
	}
	return true
}

const importPathChars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~+"

// registerWellKnown registers the well-known types the files may import.
func registerWellKnown(files *protoregistry.Files) error {
	for _, fd := range []protoreflect.FileDescriptor{
		timestamppb.File_google_protobuf_timestamp_proto,
		durationpb.File_google_protobuf_duration_proto,
		emptypb.File_google_protobuf_empty_proto,
	} {
		if err := files.RegisterFile(fd); err != nil {
			return err
		}
	}
	return nil
}

// fileBuild holds the file descriptor protos being built, by package;
// main is the application package and goPrefix the prefix of their
// go_package options ("": none).
type fileBuild struct {
	main     string
	goPrefix string
	byPkg    map[string]*descriptorpb.FileDescriptorProto
}

// file returns the file of package pkg, creating it (importing the main
// file unless it is the main file) on first use.
func (fb *fileBuild) file(pkg string) *descriptorpb.FileDescriptorProto {
	if f, ok := fb.byPkg[pkg]; ok {
		return f
	}
	f := &descriptorpb.FileDescriptorProto{Name: new(fileOf(pkg)), Package: new(pkg), Syntax: new("proto3")}
	if fb.goPrefix != "" {
		f.Options = &descriptorpb.FileOptions{GoPackage: new(goPackage(fb.goPrefix, pkg))}
	}
	if pkg != fb.main {
		f.Dependency = append(f.Dependency, fileOf(fb.main))
	}
	fb.byPkg[pkg] = f
	return f
}

// addService adds the service description of sv to its package's file,
// with the import of google.protobuf.Empty when a method uses it.
func (fb *fileBuild) addService(sv *Service) {
	f := fb.file(sv.pkg)
	sp := &descriptorpb.ServiceDescriptorProto{Name: new(sv.name)}
	for _, m := range sv.Methods {
		for _, mc := range []*messageCodec{m.in, m.out} {
			if mc.empty && !slices.Contains(f.Dependency, fileEmpty) {
				f.Dependency = append(f.Dependency, fileEmpty)
			}
		}
		sp.Method = append(sp.Method, streamMethod(&descriptorpb.MethodDescriptorProto{
			Name:       new(m.Name),
			InputType:  new("." + m.in.full),
			OutputType: new("." + m.out.full),
		}, m.Desc.Kind()))
	}
	f.Service = append(f.Service, sp)
}

// register builds the files and registers them in files, the main file
// first (the others import it), then by package name.
func (fb *fileBuild) register(files *protoregistry.Files) error {
	pkgs := slices.Sorted(maps.Keys(fb.byPkg))
	pkgs = slices.DeleteFunc(pkgs, func(p string) bool { return p == fb.main })
	pkgs = append([]string{fb.main}, pkgs...)
	for _, pkg := range pkgs {
		fp := fb.byPkg[pkg]
		slices.Sort(fp.Dependency)
		fd, err := protodesc.NewFile(fp, files)
		if err != nil {
			return fmt.Errorf("building %s: %w", fp.GetName(), err)
		}
		if err := files.RegisterFile(fd); err != nil {
			return fmt.Errorf("registering %s: %w", fp.GetName(), err)
		}
	}
	return nil
}

// linkCodecs links every codec of the schema to its registered
// descriptor, and every method to its method descriptor.
func (set *Set) linkCodecs(s *schema) error {
	for _, mc := range s.byType {
		if err := set.link(mc); err != nil {
			return err
		}
	}
	for _, mc := range s.rpcs {
		if err := set.link(mc); err != nil {
			return err
		}
	}
	if s.empty != nil {
		if err := set.link(s.empty); err != nil {
			return err
		}
	}
	for full, m := range set.methods {
		d, err := set.Files.FindDescriptorByName(protoreflect.FullName(strings.ReplaceAll(full[1:], "/", ".")))
		if err != nil {
			return fmt.Errorf("method %s: %w", full, err)
		}
		m.RPC = d.(protoreflect.MethodDescriptor)
	}
	return nil
}

// link sets the descriptors of mc and of its fields.
func (set *Set) link(mc *messageCodec) error {
	d, err := set.Files.FindDescriptorByName(protoreflect.FullName(mc.full))
	if err != nil {
		return fmt.Errorf("message %s: %w", mc.full, err)
	}
	mc.desc = d.(protoreflect.MessageDescriptor)
	for i := range mc.fields {
		mc.fields[i].fd = mc.desc.Fields().ByNumber(protoreflect.FieldNumber(mc.fields[i].number))
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
				return "", "", "", fmt.Errorf("operation %q: GRPCService %q: package %q is not dot-separated protobuf identifiers", d.ID, d.GRPCService, pkg)
			}
		}
	}
	if d.GRPCMethod != "" {
		mname = d.GRPCMethod
	}
	if !isIdent(sname) {
		return "", "", "", fmt.Errorf("operation %q: service name %q is not a protobuf identifier", d.ID, sname)
	}
	if !isIdent(mname) {
		return "", "", "", fmt.Errorf("operation %q: method name %q is not a protobuf identifier", d.ID, mname)
	}
	return pkg, sname, mname, nil
}

// IsFullMethod reports whether full is a full method name such as
// "/acme.orders.v1.Orders/Place".
func IsFullMethod(full string) bool {
	svc, m, _ := strings.Cut(strings.TrimPrefix(full, "/"), "/")
	return strings.HasPrefix(full, "/") && isPackage(svc) && isIdent(m)
}

// isPackage reports whether p is dot-separated protobuf identifiers.
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
