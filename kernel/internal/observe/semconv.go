package observe

import (
	"net"
	"strconv"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// SemconvSchemaURL is the version of the OpenTelemetry semantic conventions
// whose HTTP and RPC server attributes and metrics the package records
// beside its own sundial.* ones.
const SemconvSchemaURL = semconv.SchemaURL

// Metric names of the OpenTelemetry semantic conventions (v1.43.0), in
// seconds, recorded beside MetricInvocationDuration for HTTP and gRPC
// invocations whose adapter described the request ([Transport]).
const (
	// MetricHTTPServerDuration is http.server.request.duration, by
	// http.request.method, url.scheme, http.route (when a route matched),
	// http.response.status_code and error.type (5xx only).
	MetricHTTPServerDuration = "http.server.request.duration"
	// MetricRPCServerDuration is rpc.server.call.duration (the name the
	// conventions gave rpc.server.duration when they moved it to
	// seconds), by rpc.system.name, rpc.method, rpc.response.status_code
	// and error.type (server errors only).
	MetricRPCServerDuration = "rpc.server.call.duration"
)

// Span attributes of the RPC conventions before v1.39, which many
// dashboards and backends still read; gRPC spans carry them beside the
// current ones (rpc.system.name, rpc.method, rpc.response.status_code).
const (
	AttrLegacyRPCSystem     = "rpc.system"
	AttrLegacyRPCService    = "rpc.service"
	AttrLegacyGRPCStatus    = "rpc.grpc.status_code"
	attrRPCMethodOriginal   = "rpc.method_original"
	attrHTTPMethodOriginal  = "http.request.method_original"
	otherValue              = "_OTHER"
	maxSemconvMetricAttrSet = 1024
)

// Transport describes the protocol request of one call (kernel.Transport,
// which has the same fields and converts to it).
type Transport struct {
	Method, Route, Scheme, Path, Host, ProtocolVersion string
	RPCMethod                                          string
	RPCUnknown                                         bool
	Status                                             func(err error) int
}

// transport is the Transport of one call, with the methods that turn it
// into the conventions' attributes.
type transport Transport

// isHTTP and isRPC report which conventions t describes.
func (t *transport) isHTTP() bool { return t.Method != "" }
func (t *transport) isRPC() bool  { return t.RPCMethod != "" }

// knownMethods are the HTTP methods the conventions name; others are
// reported as _OTHER.
var knownMethods = map[string]bool{
	"GET": true, "HEAD": true, "POST": true, "PUT": true, "DELETE": true,
	"CONNECT": true, "OPTIONS": true, "TRACE": true, "PATCH": true, "QUERY": true,
}

// grpcCodes are the names of the gRPC status codes, by number.
var grpcCodes = [...]string{"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
	"NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
	"ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"}

// grpcServerError reports whether a gRPC code is an error of the server
// by the conventions (UNKNOWN, DEADLINE_EXCEEDED, UNIMPLEMENTED, INTERNAL,
// UNAVAILABLE, DATA_LOSS): only those set error.type.
func grpcServerError(code int) bool {
	switch code {
	case 2, 4, 12, 13, 14, 15:
		return true
	}
	return false
}

func grpcCodeName(code int) string {
	if code >= 0 && code < len(grpcCodes) {
		return grpcCodes[code]
	}
	return strconv.Itoa(code)
}

// status returns the protocol status of the outcome err.
func (t *transport) status(err error) int {
	if t.Status != nil {
		return t.Status(err)
	}
	switch {
	case err == nil && t.isHTTP():
		return 200
	case err == nil:
		return 0
	case t.isHTTP():
		return 500
	}
	return 13
}

// splitRPC splits "/pkg.Service/Method" into "pkg.Service" and
// "pkg.Service/Method".
func splitRPC(full string) (service, method string) {
	if len(full) > 0 && full[0] == '/' {
		full = full[1:]
	}
	for i := len(full) - 1; i >= 0; i-- {
		if full[i] == '/' {
			return full[:i], full
		}
	}
	return "", full
}

// startAttrs returns the conventions' attributes known when the call
// arrives.
func (t *transport) startAttrs() []attribute.KeyValue {
	switch {
	case t.isHTTP():
		attrs := make([]attribute.KeyValue, 0, 9)
		if knownMethods[t.Method] {
			attrs = append(attrs, semconv.HTTPRequestMethodKey.String(t.Method))
		} else {
			attrs = append(attrs, semconv.HTTPRequestMethodKey.String(otherValue), attribute.String(attrHTTPMethodOriginal, t.Method))
		}
		if t.Scheme != "" {
			attrs = append(attrs, semconv.URLScheme(t.Scheme))
		}
		if t.Path != "" {
			attrs = append(attrs, semconv.URLPath(t.Path))
		}
		if t.Route != "" {
			attrs = append(attrs, semconv.HTTPRoute(t.Route))
		}
		if host, port := splitHost(t.Host, t.Scheme); host != "" {
			attrs = append(attrs, semconv.ServerAddress(host))
			if port > 0 {
				attrs = append(attrs, semconv.ServerPort(port))
			}
		}
		if t.ProtocolVersion != "" {
			attrs = append(attrs, semconv.NetworkProtocolVersion(t.ProtocolVersion))
		}
		return attrs
	case t.isRPC():
		service, method := splitRPC(t.RPCMethod)
		attrs := make([]attribute.KeyValue, 0, 5)
		attrs = append(attrs, semconv.RPCSystemNameGRPC, attribute.String(AttrLegacyRPCSystem, "grpc"))
		if t.RPCUnknown {
			attrs = append(attrs, semconv.RPCMethodKey.String(otherValue), attribute.String(attrRPCMethodOriginal, method))
		} else {
			attrs = append(attrs, semconv.RPCMethod(method), attribute.String(AttrLegacyRPCService, service))
		}
		return attrs
	}
	return nil
}

// splitHost returns the host and port of a Host header, the port defaulted
// from the scheme.
func splitHost(hostport, scheme string) (string, int) {
	if hostport == "" {
		return "", 0
	}
	host, p, err := net.SplitHostPort(hostport)
	if err != nil {
		host, p = hostport, ""
	}
	port, _ := strconv.Atoi(p)
	if port == 0 {
		switch scheme {
		case "http":
			port = 80
		case "https":
			port = 443
		}
	}
	return host, port
}

// semconvKey identifies the attribute set of one conventions' duration
// point.
type semconvKey struct {
	rpc                   bool
	method, scheme, route string
	status                int
}

// endAttrs returns the span attributes of the status the outcome got, and
// the key of its metric point.
func (t *transport) endAttrs(status int) ([]attribute.KeyValue, semconvKey) {
	switch {
	case t.isHTTP():
		method := t.Method
		if !knownMethods[method] {
			method = otherValue
		}
		k := semconvKey{method: method, scheme: t.Scheme, route: t.Route, status: status}
		attrs := []attribute.KeyValue{semconv.HTTPResponseStatusCode(status)}
		if status >= 500 {
			attrs = append(attrs, semconv.ErrorTypeKey.String(strconv.Itoa(status)))
		}
		return attrs, k
	case t.isRPC():
		_, method := splitRPC(t.RPCMethod)
		if t.RPCUnknown {
			method = otherValue
		}
		name := grpcCodeName(status)
		attrs := []attribute.KeyValue{semconv.RPCResponseStatusCodeKey.String(name), attribute.Int(AttrLegacyGRPCStatus, status)}
		if grpcServerError(status) {
			attrs = append(attrs, semconv.ErrorTypeKey.String(name))
		}
		return attrs, semconvKey{rpc: true, method: method, status: status}
	}
	return nil, semconvKey{}
}

// semconvSets caches the record options of the conventions' duration
// points: their attributes come from closed sets (methods, route
// templates, statuses), but a cache bounds the work even so.
type semconvSets struct {
	mu sync.RWMutex
	m  map[semconvKey][]metric.RecordOption
}

func (s *semconvSets) get(k semconvKey) []metric.RecordOption {
	s.mu.RLock()
	opts, ok := s.m[k]
	s.mu.RUnlock()
	if ok {
		return opts
	}
	opts = []metric.RecordOption{metric.WithAttributeSet(k.set())}
	s.mu.Lock()
	if s.m == nil {
		s.m = make(map[semconvKey][]metric.RecordOption)
	}
	if len(s.m) < maxSemconvMetricAttrSet {
		s.m[k] = opts
	}
	s.mu.Unlock()
	return opts
}

// set returns the metric attributes of k.
func (k semconvKey) set() attribute.Set {
	if k.rpc {
		name := grpcCodeName(k.status)
		attrs := []attribute.KeyValue{semconv.RPCSystemNameGRPC, semconv.RPCMethod(k.method), semconv.RPCResponseStatusCodeKey.String(name)}
		if grpcServerError(k.status) {
			attrs = append(attrs, semconv.ErrorTypeKey.String(name))
		}
		return attribute.NewSet(attrs...)
	}
	attrs := []attribute.KeyValue{semconv.HTTPRequestMethodKey.String(k.method), semconv.HTTPResponseStatusCode(k.status)}
	if k.scheme != "" {
		attrs = append(attrs, semconv.URLScheme(k.scheme))
	}
	if k.route != "" {
		attrs = append(attrs, semconv.HTTPRoute(k.route))
	}
	if k.status >= 500 {
		attrs = append(attrs, semconv.ErrorTypeKey.String(strconv.Itoa(k.status)))
	}
	return attribute.NewSet(attrs...)
}
