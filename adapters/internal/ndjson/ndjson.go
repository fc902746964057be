// Package ndjson reads newline-delimited JSON: one message a line.
// The adapters read a client stream's messages with it.
package ndjson

import (
	"bufio"
	"bytes"
	"errors"
	"io"
)

// ErrTooLong is returned for a line longer than the reader's limit.
var ErrTooLong = errors.New("ndjson: line too long")

// Reader reads the lines of an NDJSON stream, each at most limit bytes.
// It skips empty lines.
type Reader struct {
	br    *bufio.Reader
	limit int
	line  []byte
}

// NewReader returns a Reader of r whose lines are at most limit bytes.
func NewReader(r io.Reader, limit int) *Reader {
	return &Reader{br: bufio.NewReaderSize(r, 16<<10), limit: limit}
}

// Next returns the next non-empty line, without its line ending or
// surrounding white space. The slice is valid until the next call. It
// returns io.EOF after the last line, and ErrTooLong for a line over the
// limit; the line is not read to its end. Blank lines before a line count
// toward its limit.
func (l *Reader) Next() ([]byte, error) {
	blank := 0 // bytes of the blank lines skipped before this line
	for {
		l.line = l.line[:0]
		for {
			chunk, err := l.br.ReadSlice('\n')
			if len(l.line)+len(chunk) > l.limit+2 { // + "\r\n"
				return nil, ErrTooLong
			}
			l.line = append(l.line, chunk...)
			if err == bufio.ErrBufferFull {
				continue
			}
			if err == io.EOF && len(bytes.TrimSpace(l.line)) > 0 {
				break // a last line without its newline
			}
			if err != nil {
				return nil, err
			}
			break
		}
		if line := bytes.TrimSpace(l.line); len(line) > 0 {
			if len(line) > l.limit {
				return nil, ErrTooLong
			}
			return line, nil
		}
		// Blank lines count as the line they precede: a caller cannot
		// send them without bound.
		if blank += len(l.line); blank > l.limit+2 {
			return nil, ErrTooLong
		}
	}
}
