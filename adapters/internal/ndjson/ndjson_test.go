package ndjson

import (
	"errors"
	"io"
	"strings"
	"testing"
)

// TestReaderLines reads lines, skips empty ones, takes a last line
// without its newline, and refuses a line over the limit.
func TestReaderLines(t *testing.T) {
	r := NewReader(strings.NewReader("{\"a\":1}\r\n\n  \n{\"b\":2}\n{\"c\":3}"), 8)
	for _, want := range []string{`{"a":1}`, `{"b":2}`, `{"c":3}`} {
		got, err := r.Next()
		if err != nil || string(got) != want {
			t.Fatalf("Next = %q, %v; want %q", got, err, want)
		}
	}
	if _, err := r.Next(); err != io.EOF {
		t.Fatalf("Next at the end = %v, want io.EOF", err)
	}
	long := NewReader(strings.NewReader(strings.Repeat("x", 40000)+"\n"), 30000)
	if _, err := long.Next(); !errors.Is(err, ErrTooLong) {
		t.Fatalf("Next of a long line = %v, want ErrTooLong", err)
	}
	short := NewReader(strings.NewReader(`{"long":true}`+"\n"), 8)
	if _, err := short.Next(); !errors.Is(err, ErrTooLong) {
		t.Fatalf("Next of a 13-byte line with limit 8 = %v, want ErrTooLong", err)
	}
	blanks := NewReader(strings.NewReader(strings.Repeat(" \n", 100)+`{"a":1}`+"\n"), 8)
	if _, err := blanks.Next(); !errors.Is(err, ErrTooLong) {
		t.Fatalf("Next after 200 bytes of blank lines with limit 8 = %v, want ErrTooLong", err)
	}
}
