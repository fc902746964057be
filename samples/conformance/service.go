package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
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

// StreamResponseDefinition says how a streaming call answers.
type StreamResponseDefinition struct {
	ResponseHeaders  []Header `json:"responseHeaders" proto:"1"`
	ResponseData     [][]byte `json:"responseData" proto:"2"`
	ResponseDelayMs  uint32   `json:"responseDelayMs" proto:"3"`
	Error            *Error   `json:"error" proto:"4"`
	ResponseTrailers []Header `json:"responseTrailers" proto:"5"`
}

// ServerStreamRequest is the request of ServerStream.
type ServerStreamRequest struct {
	ResponseDefinition *StreamResponseDefinition `json:"responseDefinition" proto:"1"`
	RequestData        []byte                    `json:"requestData" proto:"2"`
}

// BidiStreamRequest is one request of BidiStream.
type BidiStreamRequest struct {
	ResponseDefinition *StreamResponseDefinition `json:"responseDefinition" proto:"1"`
	FullDuplex         bool                      `json:"fullDuplex" proto:"2"`
	RequestData        []byte                    `json:"requestData" proto:"3"`
}

// StreamResponse is the response of ServerStream, ClientStream and
// BidiStream.
type StreamResponse struct {
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
	if err := operations.Register(reg, operations.Descriptor{
		ID: "conformance.idempotent-unary", GRPCService: svc, GRPCMethod: "IdempotentUnary",
		Method: http.MethodGet, Path: "/conformance/idempotent-unary", Idempotent: true, InputPolicy: allow,
	}, unary("IdempotentUnaryRequest")); err != nil {
		return err
	}
	if err := operations.RegisterServerStream(reg, operations.Descriptor{
		ID: "conformance.server-stream", GRPCService: svc, GRPCMethod: "ServerStream", InputPolicy: allow,
	}, serverStream); err != nil {
		return err
	}
	if err := operations.RegisterClientStream(reg, operations.Descriptor{
		ID: "conformance.client-stream", GRPCService: svc, GRPCMethod: "ClientStream", InputPolicy: allow,
	}, clientStream); err != nil {
		return err
	}
	return operations.RegisterBidiStream(reg, operations.Descriptor{
		ID: "conformance.bidi-stream", GRPCService: svc, GRPCMethod: "BidiStream", InputPolicy: allow,
	}, bidiStream)
}

// serverStream answers as the request's definition asks: the headers,
// each response, then the error or the end of the stream with the
// trailers. The first response echoes the request.
func serverStream(ctx context.Context, in ServerStreamRequest, s *operations.Sender[StreamResponse]) error {
	md := operations.MetadataFrom(ctx)
	info := requestInfo(md, Any{TypeURL: typePrefix + "ServerStreamRequest", Value: marshal(in)})
	def := in.ResponseDefinition
	if def == nil {
		return nil
	}
	addHeaders(md.AddHeader, def.ResponseHeaders)
	addHeaders(md.AddTrailer, def.ResponseTrailers)
	return respond(ctx, def, info, 0, s)
}

// respond sends the responses of def from the sent-th on, each after the
// definition's delay, the first with info, then returns its error.
func respond(ctx context.Context, def *StreamResponseDefinition, info *RequestInfo,
	sent int, s *operations.Sender[StreamResponse]) error {
	for ; sent < len(def.ResponseData); sent++ {
		p := &ConformancePayload{Data: def.ResponseData[sent]}
		if sent == 0 {
			p.RequestInfo = info
		}
		if err := delay(ctx, def.ResponseDelayMs); err != nil {
			return err
		}
		if err := s.Send(StreamResponse{Payload: p}); err != nil {
			return err
		}
	}
	if def.Error == nil {
		return nil
	}
	if sent > 0 {
		info = nil
	}
	return statusError(def.Error, info)
}

// clientStream receives every request, then answers as the first one's
// definition asks, echoing them all.
func clientStream(ctx context.Context, r *operations.Receiver[UnaryRequest]) (StreamResponse, error) {
	md := operations.MetadataFrom(ctx)
	var def *UnaryResponseDefinition
	var reqs []Any
	for i := 0; ; i++ {
		in, err := r.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return StreamResponse{}, err
		}
		if i == 0 {
			def = in.ResponseDefinition
		}
		reqs = append(reqs, Any{TypeURL: typePrefix + "ClientStreamRequest", Value: marshal(in)})
	}
	info := requestInfo(md, reqs...)
	if def == nil {
		return StreamResponse{Payload: &ConformancePayload{RequestInfo: info}}, nil
	}
	addHeaders(md.AddHeader, def.ResponseHeaders)
	addHeaders(md.AddTrailer, def.ResponseTrailers)
	if def.Error != nil {
		return StreamResponse{}, statusError(def.Error, info)
	}
	if err := delay(ctx, def.ResponseDelayMs); err != nil {
		return StreamResponse{}, err
	}
	return StreamResponse{Payload: &ConformancePayload{Data: def.ResponseData, RequestInfo: info}}, nil
}

// bidiStream answers as the first request's definition asks. Full duplex,
// it sends one response per request, each echoing the requests since the
// last; half duplex, it sends them all once the caller has sent its last.
func bidiStream(ctx context.Context, r *operations.Receiver[BidiStreamRequest], s *operations.Sender[StreamResponse]) error {
	md := operations.MetadataFrom(ctx)
	var def *StreamResponseDefinition
	var reqs []Any
	full, sent := false, 0
	for i := 0; ; i++ {
		in, err := r.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		reqs = append(reqs, Any{TypeURL: typePrefix + "BidiStreamRequest", Value: marshal(in)})
		if i == 0 {
			def, full = in.ResponseDefinition, in.FullDuplex
			if def != nil {
				addHeaders(md.AddHeader, def.ResponseHeaders)
				addHeaders(md.AddTrailer, def.ResponseTrailers)
			}
		}
		if !full {
			continue
		}
		if sent >= len(def.GetResponseData()) {
			break
		}
		info := &RequestInfo{Requests: reqs}
		if sent == 0 {
			info = requestInfo(md, reqs...)
		}
		if err := delay(ctx, def.ResponseDelayMs); err != nil {
			return err
		}
		if err := s.Send(StreamResponse{Payload: &ConformancePayload{Data: def.ResponseData[sent], RequestInfo: info}}); err != nil {
			return err
		}
		sent++
		reqs = nil
	}
	if def == nil {
		return nil
	}
	return respond(ctx, def, requestInfo(md, reqs...), sent, s)
}

// GetResponseData returns d's response data; nil for a nil d.
func (d *StreamResponseDefinition) GetResponseData() [][]byte {
	if d == nil {
		return nil
	}
	return d.ResponseData
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
// info's, when info is not nil.
func statusError(e *Error, info *RequestInfo) error {
	p := &spb.Status{Code: e.Code}
	if e.Message != nil {
		p.Message = *e.Message
	}
	for _, d := range e.Details {
		p.Details = append(p.Details, &anypb.Any{TypeUrl: d.TypeURL, Value: d.Value})
	}
	if info != nil {
		p.Details = append(p.Details, &anypb.Any{TypeUrl: typePrefix + "ConformancePayload.RequestInfo", Value: marshal(*info)})
	}
	if codes.Code(p.Code) == codes.OK {
		p.Code = int32(codes.Unknown)
	}
	return status.ErrorProto(p)
}
