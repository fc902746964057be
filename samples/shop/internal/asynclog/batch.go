package asynclog

import "io"

// Batch is an [io.Writer] that keeps what is written to it in a buffer
// until [Batch.Flush], and writes the buffer in one Write. Each Write's
// bytes reach the destination whole, in one Write of their own or with
// others: a record is never split between two, so another writer to the
// same destination never lands inside it. A Batch is the writer of the
// handler a [Handler] wraps, flushed by [WithFlush]; it is not safe for
// concurrent use.
type Batch struct {
	w    io.Writer
	buf  []byte
	size int
}

// NewBatch returns a Batch writing to w, which keeps up to size bytes.
func NewBatch(w io.Writer, size int) *Batch {
	return &Batch{w: w, size: size}
}

// Write keeps p for the next Flush. It flushes first when p would not fit;
// p larger than the buffer is written at once.
func (b *Batch) Write(p []byte) (int, error) {
	if len(b.buf)+len(p) > b.size {
		if err := b.Flush(); err != nil {
			return 0, err
		}
		if len(p) > b.size {
			return b.w.Write(p)
		}
	}
	b.buf = append(b.buf, p...)
	return len(p), nil
}

// Flush writes what the Batch keeps, in one Write. The bytes are gone
// afterwards, written or not.
func (b *Batch) Flush() error {
	if len(b.buf) == 0 {
		return nil
	}
	_, err := b.w.Write(b.buf)
	b.buf = b.buf[:0]
	return err
}
