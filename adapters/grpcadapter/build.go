package grpcadapter

import (
	"fmt"
	"strings"

	"google.golang.org/grpc"

	"github.com/sundial-go/sundial/adapters/internal/rpcschema"
	"github.com/sundial-go/sundial/operations"
)

// build builds the adapter's methods, files and service descriptions from
// the kernel's operations (see rpcschema.Build).
func (a *Adapter) build() error {
	set, err := rpcschema.Build(a.k.Operations(), a.cfg.pkg, a.cfg.goPrefix)
	if err != nil {
		return fmt.Errorf("grpcadapter: %w", err)
	}
	a.set, a.files = set, set.Files
	for _, m := range set.Methods() {
		a.methods[m.Full] = &method{Method: m, a: a}
	}
	a.describeServices()
	return nil
}

// describeServices builds the service descriptions for grpc-go and the
// list of methods, sorted by service name. A streaming operation is a
// stream of its service, served by handleStream.
func (a *Adapter) describeServices() {
	for _, sv := range a.set.Services {
		sd := &grpc.ServiceDesc{
			ServiceName: sv.Full,
			HandlerType: (*any)(nil),
			Metadata:    sv.File,
		}
		for _, rm := range sv.Methods {
			m := a.methods[rm.Full]
			if k := m.Desc.Kind(); k != operations.Unary {
				sd.Streams = append(sd.Streams, grpc.StreamDesc{StreamName: m.Name, Handler: m.handleStream,
					ServerStreams: k != operations.ClientStream, ClientStreams: k != operations.ServerStream})
			} else {
				sd.Methods = append(sd.Methods, grpc.MethodDesc{MethodName: m.Name, Handler: m.handle})
			}
			a.list = append(a.list, Method{FullName: m.Full, OperationID: m.Desc.ID, Input: m.Input(), Output: m.Output()})
		}
		a.services = append(a.services, sd)
	}
}

// splitFull splits "/pkg.Service/Method" into "pkg.Service" and "Method".
func splitFull(full string) (string, string) {
	s, m, _ := strings.Cut(strings.TrimPrefix(full, "/"), "/")
	return s, m
}
