package grpcadapter

import (
	"google.golang.org/grpc/reflection"
	reflectionv1 "google.golang.org/grpc/reflection/grpc_reflection_v1"
	reflectionv1alpha "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// RegisterReflection registers the gRPC server reflection service, v1 and
// v1alpha, on s, so that tools such as grpcurl can list and call every
// method. The adapter's services are described from its own descriptors;
// every other service on s — health, the application's generated
// services — from protoregistry.GlobalFiles, where generated code
// registers itself. Call it once per server, after registering the other
// services or before: the list is read on each request.
func (a *Adapter) RegisterReflection(s reflection.GRPCServer) {
	srv := reflection.NewServerV1(reflection.ServerOptions{
		Services:           s,
		DescriptorResolver: resolver{a.files},
		ExtensionResolver:  protoregistry.GlobalTypes,
	})
	reflectionv1.RegisterServerReflectionServer(s, srv)
	reflectionv1alpha.RegisterServerReflectionServer(s, reflection.NewServer(reflection.ServerOptions{
		Services:           s,
		DescriptorResolver: resolver{a.files},
		ExtensionResolver:  protoregistry.GlobalTypes,
	}))
}

// resolver looks descriptors up in the adapter's files first, then in
// protoregistry.GlobalFiles.
type resolver struct{ local *protoregistry.Files }

func (r resolver) FindFileByPath(path string) (protoreflect.FileDescriptor, error) {
	if fd, err := r.local.FindFileByPath(path); err == nil {
		return fd, nil
	}
	return protoregistry.GlobalFiles.FindFileByPath(path)
}

func (r resolver) FindDescriptorByName(name protoreflect.FullName) (protoreflect.Descriptor, error) {
	if d, err := r.local.FindDescriptorByName(name); err == nil {
		return d, nil
	}
	return protoregistry.GlobalFiles.FindDescriptorByName(name)
}
