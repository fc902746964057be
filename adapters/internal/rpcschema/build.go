package rpcschema

import (
	"fmt"
	"go/token"
	"maps"
	"regexp"
	"slices"
	"strings"

	"google.golang.org/grpc"
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

// This file builds an Adapter's methods, proto files and service
// descriptions from the kernel's operations.

// namedOp is one served operation with the names of its method.
type namedOp struct {
	op               *kernel.Op
	d                *operations.Descriptor
	pkg, sname, name string
}

// serviceBuild is one service being built: its proto package, its simple
// name and its methods, in registration order.
type serviceBuild struct {
	pkg, name string
	methods   []*method
}

// build derives the schema, the files and the service descriptions.
func (a *Adapter) build() error {
	s := newSchema(a.cfg.pkg)
	ops, err := a.nameOperations()
	if err != nil {
		return err
	}
	svcs, err := a.buildMethods(s, ops)
	if err != nil {
		return err
	}
	if err := a.checkServiceNames(s, svcs); err != nil {
		return err
	}
	if err := checkMethodNames(svcs); err != nil {
		return err
	}
	if err := a.buildFiles(s, svcs); err != nil {
		return err
	}
	if err := a.linkCodecs(s); err != nil {
		return err
	}
	a.describeServices(svcs)
	return nil
}

// nameOperations returns the operations the kernel serves, each with the
// names of its method.
func (a *Adapter) nameOperations() ([]namedOp, error) {
	var ops []namedOp
	for _, op := range a.k.Operations() {
		d := op.Descriptor()
		pkg, sname, mname, err := names(a.cfg.pkg, d)
		if err != nil {
			return nil, err
		}
		ops = append(ops, namedOp{op, d, pkg, sname, mname})
	}
	return ops, nil
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
func (a *Adapter) buildMethods(s *schema, ops []namedOp) (map[string]*serviceBuild, error) {
	services := servicesByMethod(ops)
	svcs := make(map[string]*serviceBuild) // by full service name
	for _, op := range ops {
		d, pkg, sname, mname := op.d, op.pkg, op.sname, op.name
		where := fmt.Sprintf("operation %q", d.ID)
		full := "/" + pkg + "." + sname + "/" + mname
		if other, dup := a.methods[full]; dup {
			return nil, fmt.Errorf("grpcadapter: operations %q and %q both map to method %s; set GRPCService or GRPCMethod on one of them", other.desc.ID, d.ID, full)
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
		m := &method{a: a, full: full, op: op.op, desc: d, in: in, out: out}
		a.methods[full] = m
		key := pkg + "." + sname
		if svcs[key] == nil {
			svcs[key] = &serviceBuild{pkg: pkg, name: sname}
		}
		svcs[key].methods = append(svcs[key].methods, m)
	}
	return svcs, nil
}

// checkServiceNames rejects a service named like a message of the
// application package.
func (a *Adapter) checkServiceNames(s *schema, svcs map[string]*serviceBuild) error {
	for key := range svcs {
		if mc := s.byName[strings.TrimPrefix(key, a.cfg.pkg+".")]; mc != nil && mc.full == key {
			return fmt.Errorf("grpcadapter: service %s has the name of the message built from Go type %v; rename the type or set GRPCService on the operations of that service", key, mc.goType)
		}
	}
	return nil
}

// checkMethodNames rejects a method named like a message its service
// uses: protoc resolves the types of an rpc in the scope of its service
// first, so the method would hide the message.
func checkMethodNames(svcs map[string]*serviceBuild) error {
	for key, sv := range svcs {
		for _, m := range sv.methods {
			for _, mc := range []*messageCodec{m.in, m.out} {
				if on, ok := sv.methodNamed(mc.name); ok {
					return fmt.Errorf("grpcadapter: service %s has a method %s named like the message %s of method %s; set GRPCMethod on one of them", key, on, mc.full, m.full)
				}
			}
		}
	}
	return nil
}

// methodNamed reports whether the service has a method called name.
func (sv *serviceBuild) methodNamed(name string) (string, bool) {
	for _, other := range sv.methods {
		if _, on := splitFull(other.full); on == name {
			return on, true
		}
	}
	return "", false
}

// fileOf is the name of the proto file of package pkg.
func fileOf(pkg string) string { return strings.ReplaceAll(pkg, ".", "/") + "/operations.proto" }

// buildFiles builds and registers one file per package: the application
// package's file holds every message, the others import it.
func (a *Adapter) buildFiles(s *schema, svcs map[string]*serviceBuild) error {
	a.files = new(protoregistry.Files)
	if err := registerWellKnown(a.files); err != nil {
		return err
	}
	fb := fileBuild{main: a.cfg.pkg, goPrefix: a.cfg.goPrefix, byPkg: map[string]*descriptorpb.FileDescriptorProto{}}
	mf := fb.file(a.cfg.pkg)
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
	return fb.register(a.files)
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
			return fmt.Errorf("grpcadapter: %w", err)
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
func (fb *fileBuild) addService(sv *serviceBuild) {
	f := fb.file(sv.pkg)
	sp := &descriptorpb.ServiceDescriptorProto{Name: new(sv.name)}
	for _, m := range sv.methods {
		for _, mc := range []*messageCodec{m.in, m.out} {
			if mc.empty && !slices.Contains(f.Dependency, fileEmpty) {
				f.Dependency = append(f.Dependency, fileEmpty)
			}
		}
		_, mname := splitFull(m.full)
		sp.Method = append(sp.Method, streamMethod(&descriptorpb.MethodDescriptorProto{
			Name:       new(mname),
			InputType:  new("." + m.in.full),
			OutputType: new("." + m.out.full),
		}, m.desc.Kind()))
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
			return fmt.Errorf("grpcadapter: building %s: %w", fp.GetName(), err)
		}
		if err := files.RegisterFile(fd); err != nil {
			return fmt.Errorf("grpcadapter: registering %s: %w", fp.GetName(), err)
		}
	}
	return nil
}

// linkCodecs links every codec of the schema to its registered descriptor.
func (a *Adapter) linkCodecs(s *schema) error {
	for _, mc := range s.byType {
		if err := a.link(mc); err != nil {
			return err
		}
	}
	for _, mc := range s.rpcs {
		if err := a.link(mc); err != nil {
			return err
		}
	}
	if s.empty != nil {
		return a.link(s.empty)
	}
	return nil
}

// link sets the descriptors of mc and of its fields.
func (a *Adapter) link(mc *messageCodec) error {
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

// describeServices builds the service descriptions for grpc-go and the
// list of methods, sorted by service name. A streaming operation is a
// stream of its service, served by handleStream.
func (a *Adapter) describeServices(svcs map[string]*serviceBuild) {
	for _, key := range slices.Sorted(maps.Keys(svcs)) {
		sv := svcs[key]
		sd := &grpc.ServiceDesc{
			ServiceName: key,
			HandlerType: (*any)(nil),
			Metadata:    fileOf(sv.pkg),
		}
		for _, m := range sv.methods {
			_, mname := splitFull(m.full)
			if k := m.desc.Kind(); k != operations.Unary {
				sd.Streams = append(sd.Streams, grpc.StreamDesc{StreamName: mname, Handler: m.handleStream,
					ServerStreams: k != operations.ClientStream, ClientStreams: k != operations.ServerStream})
			} else {
				sd.Methods = append(sd.Methods, grpc.MethodDesc{MethodName: mname, Handler: m.handle})
			}
			a.list = append(a.list, Method{FullName: m.full, OperationID: m.desc.ID, Input: m.in.desc, Output: m.out.desc})
		}
		a.services = append(a.services, sd)
	}
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

// splitFull splits "/pkg.Service/Method" into "pkg.Service" and "Method".
func splitFull(full string) (string, string) {
	s, m, _ := strings.Cut(strings.TrimPrefix(full, "/"), "/")
	return s, m
}
