package grpcadapter

import (
	"strings"
	"sync"

	"golang.org/x/net/http2/hpack"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// This file reads the method of each stream a guarded connection opens,
// from the HPACK-coded :path of its header block. A stream of a method
// whose caller sends a stream is not waiting for its request message.

// The HPACK decoder's bounds. The dynamic table starts at HTTP/2's
// default size; a client may resize it up to hpackMaxTableSize. A longer
// string, or any other decoding error, stops the decoding for the
// connection: its streams then all count as waiting, as before it knew.
const (
	hpackTableSize    = 4096
	hpackMaxTableSize = 64 << 10
	hpackMaxString    = defaultMaxHeaderListSize
)

// headerBlock is the header block the client is sending: its stream, and
// where the reader is in the payload of its current frame.
type headerBlock struct {
	id     uint32
	opened bool   // the block opens a new stream
	path   string // its :path, once read
	end    bool   // the current frame ends the block (END_HEADERS)
	padLen bool   // the pad length byte is next
	prio   int    // priority bytes still to skip
	frag   int    // fragment bytes still to decode; -1: until the pad length is known
	size   int    // the current frame's payload length
}

// begin starts the block of a HEADERS frame of stream id, with a payload
// of size bytes.
func (b *headerBlock) begin(id uint32, flags byte, size uint32) {
	*b = headerBlock{id: id, end: flags&flagEndHeaders != 0, size: int(size), frag: int(size)}
	if flags&flagPriority != 0 {
		b.prio = 5
		b.frag -= 5
	}
	if flags&flagPadded != 0 {
		b.padLen, b.frag = true, -1
	}
}

// next starts a CONTINUATION frame of the block.
func (b *headerBlock) next(flags byte, size uint32) {
	b.end, b.size, b.frag, b.padLen, b.prio = flags&flagEndHeaders != 0, int(size), int(size), false, 0
}

// blockPayload decodes a piece of a header block frame's payload. end is
// set on the frame's last piece: at the end of the block, a stream of a
// method whose caller streams stops counting as waiting.
func (c *guardedConn) blockPayload(p []byte, end bool) {
	b := &c.blk
	for len(p) > 0 && c.hdec != nil {
		switch {
		case b.padLen:
			b.padLen = false
			b.frag = b.size - 1 - b.prio - int(p[0])
			p = p[1:]
			if b.frag < 0 {
				c.hdec = nil // a protocol error: grpc-go ends the connection
			}
		case b.prio > 0:
			k := min(b.prio, len(p))
			b.prio -= k
			p = p[k:]
		case b.frag > 0:
			k := min(b.frag, len(p))
			b.frag -= k
			if _, err := c.hdec.Write(p[:k]); err != nil {
				c.hdec = nil
			}
			p = p[k:]
		default:
			p = nil // padding
		}
	}
	if !end || !b.end || c.hdec == nil {
		return
	}
	if c.hdec.Close() != nil {
		c.hdec = nil
		return
	}
	c.hdec.SetEmitEnabled(true)
	if b.opened && callerStreams(b.path) {
		c.mu.Lock()
		c.arrivedLocked(b.id)
		c.mu.Unlock()
	}
}

// headerField receives the header fields of the block being decoded. It
// keeps the :path, and then skips the rest.
func (c *guardedConn) headerField(f hpack.HeaderField) {
	if f.Name == ":path" {
		c.blk.path = f.Value
		c.hdec.SetEmitEnabled(false)
	}
}

// streamMethods maps the full names of the methods that adapters serve to
// whether their caller sends a stream (client and bidi streams). Register
// fills it in.
var streamMethods sync.Map

// callerStreams reports whether the caller of the method at path sends a
// stream of messages: an adapter's client or bidi stream, or one of a
// generated service, whose file is in protoregistry.GlobalFiles.
func callerStreams(path string) bool {
	if v, ok := streamMethods.Load(path); ok {
		return v.(bool)
	}
	svc, name := splitFull(path)
	if !strings.HasPrefix(path, "/") || svc == "" || name == "" {
		return false
	}
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(svc))
	if err != nil {
		return false
	}
	sd, ok := d.(protoreflect.ServiceDescriptor)
	if !ok {
		return false
	}
	md := sd.Methods().ByName(protoreflect.Name(name))
	return md != nil && md.IsStreamingClient()
}
