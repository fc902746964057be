package grpcadapter

import "encoding/binary"

// This file follows the request message of each stream that awaits it.
// A stream awaits its message until the message is complete: its 5-byte
// gRPC prefix (a flag, then the length), then that many bytes. A client
// that sends a byte of it and stalls holds the stream as long as one
// that sends nothing, and counts alike.

// msgPrefixLen is the length of a gRPC message's prefix.
const msgPrefixLen = 5

// msgProgress is how much of a stream's request message has come.
type msgProgress struct {
	prefix [msgPrefixLen]byte
	n      int    // prefix bytes read
	left   uint32 // message bytes still to come, once the prefix is read
}

// read follows p, bytes of the message, and reports whether they
// complete it. Bytes past its end are not read.
func (m *msgProgress) read(p []byte) (complete bool) {
	for len(p) > 0 {
		if m.n < msgPrefixLen {
			k := copy(m.prefix[m.n:], p)
			m.n += k
			p = p[k:]
			if m.n == msgPrefixLen {
				m.left = binary.BigEndian.Uint32(m.prefix[1:])
				if m.left == 0 {
					return true
				}
			}
			continue
		}
		k := min(uint32(len(p)), m.left)
		m.left -= k
		p = p[k:]
		if m.left == 0 {
			return true
		}
	}
	return false
}

// dataFrame is the DATA frame the reader is in, of a stream that awaits
// its message (id 0: none).
type dataFrame struct {
	id     uint32
	padLen bool // the pad length byte is next
	data   int  // the frame's data bytes still to read, padding excepted
}

// clientData follows the header of a DATA frame of stream id. Its
// payload is read (dataPayload) if the stream awaits its message. One the
// client ends awaits nothing more.
func (c *guardedConn) clientData(flags byte, id uint32) {
	c.data = dataFrame{}
	if flags&flagEndStream != 0 {
		c.mu.Lock()
		c.arrivedLocked(id)
		c.mu.Unlock()
		return
	}
	if c.in.left > 0 {
		c.data = dataFrame{id: id, padLen: flags&flagPadded != 0, data: int(c.in.left)}
		c.in.block = true
	}
}

// payload reads a piece of the payload of the frame the reader is in.
func (c *guardedConn) payload(p []byte, end bool) {
	if c.in.typ == frameData {
		c.dataPayload(p)
		return
	}
	c.blockPayload(p, end)
}

// dataPayload reads a piece of a DATA frame's payload. Once the stream's
// message is complete, the stream no longer awaits it.
func (c *guardedConn) dataPayload(p []byte) {
	d := &c.data
	if d.id == 0 || len(p) == 0 {
		return
	}
	if d.padLen {
		d.padLen = false
		d.data -= 1 + int(p[0]) // below 0: a protocol error, which grpc-go answers
		p = p[1:]
	}
	p = p[:min(len(p), max(d.data, 0))]
	d.data -= len(p)
	if len(p) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.await[d.id]; !ok {
		d.id = 0 // not awaiting: a caller's stream, or one that ended
		return
	}
	var m msgProgress
	if len(c.msgs) > 0 {
		m = c.msgs[d.id]
	}
	if m.read(p) {
		c.arrivedLocked(d.id)
		d.id = 0
		return
	}
	c.msgs[d.id] = m
}
