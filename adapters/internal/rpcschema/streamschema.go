package rpcschema

import (
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/sundial-go/sundial/operations"
)

// streamMethod sets mp's stream flags as the operation kind k declares:
// the request streams for a client or bidi stream, the response for a
// server or bidi stream. A unary kind leaves both unset. It returns mp.
func streamMethod(mp *descriptorpb.MethodDescriptorProto, k operations.Kind) *descriptorpb.MethodDescriptorProto {
	client := k == operations.ClientStream || k == operations.BidiStream
	server := k == operations.ServerStream || k == operations.BidiStream
	if client {
		mp.ClientStreaming = new(true)
	}
	if server {
		mp.ServerStreaming = new(true)
	}
	return mp
}
