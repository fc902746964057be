package grpcadapter

import (
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/sundial-go/sundial/adapters/internal/rpccall"
	"github.com/sundial-go/sundial/adapters/internal/rpcschema"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
)

// Adapter serves a kernel's operations as gRPC methods and runs an
// application's own gRPC methods through the kernel's pipeline. Create it
// with New. It is safe for concurrent use.
//
// Each operation becomes one method: a unary method, or a stream method of
// its kind (docs/streaming.md). Its name follows a convention:
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
	srv    *rpccall.Server // what every call of a method does

	set      *rpcschema.Set       // the operations' methods and files
	files    *protoregistry.Files // the adapter's files and the well-known types they import
	services []*grpc.ServiceDesc
	methods  map[string]*method // by full method name
	list     []Method

	receivers  chan *reception   // to an idle receiver goroutine (receive); nil: none
	receptions sync.Pool         // of serve's *reception
	canceled   *rpccall.Canceled // calls canceled by their clients

	ops      map[string]*kernel.Op // the kernel's operations by ID, made at New
	explicit map[string]*kernel.Op // WithMethodOperations
	resolved sync.Map              // full method -> *kernel.Op (nil: none), for the interceptors
	cached   atomic.Int64          // entries stored in resolved (at most maxResolved)
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
	*rpcschema.Method
	a *Adapter
}

// service is the implementation value registered with each ServiceDesc;
// the interceptors recognise the adapter's own methods by it.
type service struct{ a *Adapter }

// New builds the gRPC services of every operation registered with k. It
// fails, naming the operation and the field, when an input or output type
// has no protobuf form (see docs/grpc.md). It fails too when two
// operations map to the same method, when a name is not a protobuf
// identifier, and when an option is invalid.
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
	a := &Adapter{k: k, cfg: cfg, methods: make(map[string]*method), receivers: make(chan *reception)}
	a.srv = rpccall.New(k, cfg.rpc)
	a.logger, a.canceled = a.srv.Logger, a.srv.Canceled
	a.ops = make(map[string]*kernel.Op)
	for _, op := range k.Operations() {
		a.ops[op.Descriptor().ID] = op
	}
	if err := a.build(); err != nil {
		return nil, err
	}
	if err := a.buildExplicit(); err != nil {
		return nil, err
	}
	return a, nil
}

// Register registers the adapter's services on s (usually the
// application's *grpc.Server). Call it before s.Serve, once per server.
func (a *Adapter) Register(s grpc.ServiceRegistrar) {
	for full, m := range a.methods {
		k := m.Desc.Kind()
		streamMethods.Store(full, k == operations.ClientStream || k == operations.BidiStream)
	}
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
