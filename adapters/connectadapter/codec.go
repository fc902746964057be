package connectadapter

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"regexp"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
)

// request is the request message of one call. The codec decodes into msg
// and keeps its error, so that a message that does not decode is the
// call's rejection, observed by the kernel like any other.
type request struct {
	msg          *dynamicpb.Message
	allowUnknown bool  // the operation's InputPolicy.AllowUnknownFields
	err          error // the decoder's; nil: msg is the message
	size         int   // the message's size on the wire, inflated
}

// init prepares r for a message of type in.
func (r *request) init(in protoreflect.MessageDescriptor, allowUnknown bool) {
	r.msg, r.allowUnknown = dynamicpb.NewMessage(in), allowUnknown
}

// codec is connect-go's codec of one name: binary protobuf, or protobuf's
// JSON mapping. It decodes a request into a *request, never failing.
type codec struct {
	name string
	json bool
}

func (c codec) Name() string { return c.name }

func (c codec) Marshal(v any) ([]byte, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("connectadapter: %T is not a protobuf message", v)
	}
	if c.json {
		return protojson.Marshal(m)
	}
	return proto.Marshal(m)
}

func (c codec) Unmarshal(data []byte, v any) error {
	r, ok := v.(*request)
	if !ok {
		m, ok := v.(proto.Message)
		if !ok {
			return fmt.Errorf("connectadapter: %T is not a protobuf message", v)
		}
		if c.json {
			return protojson.Unmarshal(data, m)
		}
		return proto.Unmarshal(data, m)
	}
	if r.msg == nil {
		return errors.New("connectadapter: request not initialised")
	}
	r.err, r.size = c.decode(data, r), len(data)
	return nil
}

// decode decodes data into r.msg. A JSON name the message does not have
// is an unknown field unless the operation allows them; binary protobuf
// keeps unknown fields for the operation's input policy to judge.
func (c codec) decode(data []byte, r *request) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("malformed message: %v", p)
		}
	}()
	if !c.json {
		return proto.Unmarshal(data, r.msg)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return errors.New("a JSON message must be an object")
	}
	return protojson.UnmarshalOptions{DiscardUnknown: r.allowUnknown}.Unmarshal(data, r.msg)
}

// unknownJSON matches protojson's error for a name the message lacks.
var unknownJSON = regexp.MustCompile(`unknown field "([^"]{1,200})"`)

// outcome returns the rejection of a request that did not decode.
func (r *request) outcome() error {
	if m := unknownJSON.FindStringSubmatch(r.err.Error()); m != nil {
		return operations.UnknownField(m[1], "")
	}
	return pipeline.Wrap(pipeline.KindValidation, pipeline.CodeValidation,
		"The request message does not decode.", r.err)
}

// gzipName is the name of gzip in Content-Encoding and its kin.
const gzipName = "gzip"

// boundedGzip returns a constructor of gzip readers that stop one byte
// past limit. connect-go reads a message through them and refuses one
// larger than limit. The reader stops there, so the rest of a
// decompression bomb is never inflated, not even to be discarded.
func boundedGzip(limit int) func() connect.Decompressor {
	return func() connect.Decompressor { return &gzipReader{limit: int64(limit)} }
}

// gzipReader is a gzip reader that ends one byte past limit.
type gzipReader struct {
	gz    gzip.Reader
	limit int64
	left  int64
}

func (g *gzipReader) Read(p []byte) (int, error) {
	if g.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > g.left {
		p = p[:g.left]
	}
	n, err := g.gz.Read(p)
	g.left -= int64(n)
	return n, err
}

func (g *gzipReader) Close() error { return g.gz.Close() }

func (g *gzipReader) Reset(r io.Reader) error {
	g.left = g.limit + 1
	return g.gz.Reset(r)
}

// newGzipWriter returns a gzip writer at the default level.
func newGzipWriter() connect.Compressor {
	w, _ := gzip.NewWriterLevel(io.Discard, gzip.DefaultCompression)
	return w
}
