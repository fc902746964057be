package grpcadapter

import (
	"context"
	"net/http"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/sundial-go/sundial/operations"
)

// withMetadata returns parent carrying the metadata of the call whose
// server context is ctx (operations.MetadataFrom): its request metadata,
// read when the handler first asks.
func withMetadata(ctx, parent context.Context) (context.Context, *operations.Metadata) {
	return operations.WithMetadata(parent, func() http.Header {
		md, _ := metadata.FromIncomingContext(ctx)
		return http.Header(md)
	})
}

// sendMetadata sends the headers and trailers the handler set as header
// and trailer metadata of the call whose server context is ctx.
func sendMetadata(ctx context.Context, meta *operations.Metadata) {
	if md := outgoing(meta.SendHeader()); md != nil {
		_ = grpc.SetHeader(ctx, md)
	}
	if md := outgoing(meta.SendTrailer()); md != nil {
		_ = grpc.SetTrailer(ctx, md)
	}
}

// outgoing returns h as metadata, its keys lower-cased, without the keys
// and values gRPC reserves or cannot carry (validMetadata). It returns
// nil when nothing is left.
func outgoing(h http.Header) metadata.MD {
	var md metadata.MD
	for k, vs := range h {
		name := strings.ToLower(k)
		for _, v := range vs {
			if validMetadata(name, v) {
				if md == nil {
					md = make(metadata.MD, len(h))
				}
				md[name] = append(md[name], v)
			}
		}
	}
	return md
}
