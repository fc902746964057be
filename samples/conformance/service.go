package main

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/sundial-go/sundial/operations"
)

// The messages of connectrpc.conformance.v1 (service.proto, config.proto)
// that the server reads and writes, as Go types with the field numbers of
// the .proto file. An enum is its number; google.protobuf.Any is Any.

// Any is google.protobuf.Any: the same fields, the same wire form.
type Any struct {
	TypeURL string `json:"typeUrl" proto:"1"`
	Value   []byte `json:"value" proto:"2"`
}

// Header is a header or trailer and its values.
type Header struct {
	Name  string   `json:"name" proto:"1"`
	Value []string `json:"value" proto:"2"`
}

// Error is the error a response definition asks for.
type Error struct {
	Code    int32   `json:"code" proto:"1"`
	Message *string `json:"message" proto:"2"`
	Details []Any   `json:"details" proto:"3"`
}

// UnaryResponseDefinition says how a unary call answers. ResponseData and
// Error are the oneof response.
type UnaryResponseDefinition struct {
	ResponseHeaders  []Header `json:"responseHeaders" proto:"1"`
	ResponseData     []byte   `json:"responseData" proto:"2"`
	Error            *Error   `json:"error" proto:"3"`
	ResponseTrailers []Header `json:"responseTrailers" proto:"4"`
	ResponseDelayMs  uint32   `json:"responseDelayMs" proto:"6"`
}

// UnaryRequest is the request of Unary and IdempotentUnary.
type UnaryRequest struct {
	ResponseDefinition *UnaryResponseDefinition `json:"responseDefinition" proto:"1"`
	RequestData        []byte                   `json:"requestData" proto:"2"`
}

// RequestInfo is ConformancePayload.RequestInfo: what the server saw.
type RequestInfo struct {
	RequestHeaders []Header `json:"requestHeaders" proto:"1"`
	TimeoutMs      *int64   `json:"timeoutMs" proto:"2"`
	Requests       []Any    `json:"requests" proto:"3"`
}

// ConformancePayload is the payload of every response.
type ConformancePayload struct {
	Data        []byte       `json:"data" proto:"1"`
	RequestInfo *RequestInfo `json:"requestInfo" proto:"2"`
}

// UnaryResponse is the response of Unary and IdempotentUnary.
type UnaryResponse struct {
	Payload *ConformancePayload `json:"payload" proto:"1"`
}

// typePrefix prefixes the type URL of an Any.
const typePrefix = "type.googleapis.com/connectrpc.conformance.v1."

// register registers the operations of ConformanceService.
func register(reg *operations.Registry) error {
	const svc = "connectrpc.conformance.v1.ConformanceService"
	allow := operations.InputPolicy{AllowUnknownFields: true}
	if err := operations.Register(reg, operations.Descriptor{
		ID: "conformance.unary", GRPCService: svc, GRPCMethod: "Unary", InputPolicy: allow,
	}, unary("UnaryRequest")); err != nil {
		return err
	}
	return operations.Register(reg, operations.Descriptor{
		ID: "conformance.idempotent-unary", GRPCService: svc, GRPCMethod: "IdempotentUnary",
		Method: http.MethodGet, Path: "/conformance/idempotent-unary", Idempotent: true, InputPolicy: allow,
	}, unary("IdempotentUnaryRequest"))
}

// unary returns the handler of a unary method whose request message is
// named msg: it answers as the request's definition asks, and echoes the
// request headers, the timeout and the request.
func unary(msg string) func(context.Context, UnaryRequest) (UnaryResponse, error) {
	return func(ctx context.Context, in UnaryRequest) (UnaryResponse, error) {
		md := operations.MetadataFrom(ctx)
		info := requestInfo(md, Any{TypeURL: typePrefix + msg, Value: marshal(in)})
		def := in.ResponseDefinition
		if def == nil {
			return UnaryResponse{Payload: &ConformancePayload{RequestInfo: info}}, nil
		}
		addHeaders(md.AddHeader, def.ResponseHeaders)
		addHeaders(md.AddTrailer, def.ResponseTrailers)
		if def.Error != nil {
			return UnaryResponse{}, statusError(def.Error, info)
		}
		if err := delay(ctx, def.ResponseDelayMs); err != nil {
			return UnaryResponse{}, err
		}
		return UnaryResponse{Payload: &ConformancePayload{Data: def.ResponseData, RequestInfo: info}}, nil
	}
}

// delay waits ms milliseconds, or until ctx ends.
func delay(ctx context.Context, ms uint32) error {
	if ms == 0 {
		return nil
	}
	t := time.NewTimer(time.Duration(ms) * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// requestInfo returns what the server saw of the call: its request
// headers, its timeout and its requests.
func requestInfo(md *operations.Metadata, reqs ...Any) *RequestInfo {
	info := &RequestInfo{Requests: reqs}
	h := md.Request()
	for name, vs := range h {
		info.RequestHeaders = append(info.RequestHeaders, Header{Name: name, Value: vs})
	}
	if ms, ok := timeoutMs(h); ok {
		info.TimeoutMs = &ms
	}
	return info
}

// timeoutMs returns the timeout the caller sent, in milliseconds:
// Connect-Timeout-Ms, or grpc-timeout over gRPC and gRPC-Web.
func timeoutMs(h http.Header) (int64, bool) {
	if v := h.Get("Connect-Timeout-Ms"); v != "" {
		ms, err := strconv.ParseInt(v, 10, 64)
		return ms, err == nil
	}
	v := h.Get("Grpc-Timeout")
	if len(v) < 2 {
		return 0, false
	}
	n, err := strconv.ParseInt(v[:len(v)-1], 10, 64)
	if err != nil {
		return 0, false
	}
	unit := map[byte]time.Duration{'H': time.Hour, 'M': time.Minute, 'S': time.Second,
		'm': time.Millisecond, 'u': time.Microsecond, 'n': time.Nanosecond}[v[len(v)-1]]
	if unit == 0 {
		return 0, false
	}
	return (time.Duration(n) * unit).Milliseconds(), true
}

// addHeaders adds each of hs with add.
func addHeaders(add func(string, ...string), hs []Header) {
	for _, h := range hs {
		add(h.Name, h.Value...)
	}
}

// statusError returns the status e asks for, with its details and then
// info's.
func statusError(e *Error, info *RequestInfo) error {
	p := &spb.Status{Code: e.Code}
	if e.Message != nil {
		p.Message = *e.Message
	}
	for _, d := range e.Details {
		p.Details = append(p.Details, &anypb.Any{TypeUrl: d.TypeURL, Value: d.Value})
	}
	p.Details = append(p.Details, &anypb.Any{TypeUrl: typePrefix + "ConformancePayload.RequestInfo", Value: marshal(*info)})
	if codes.Code(p.Code) == codes.OK {
		p.Code = int32(codes.Unknown)
	}
	return status.ErrorProto(p)
}

var _ = strings.ToLower
