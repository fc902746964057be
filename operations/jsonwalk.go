package operations

import (
	"encoding/json"
	"reflect"
	"strconv"
	"strings"

	"github.com/sundial-go/sundial/pipeline"
)

// keyWalk walks one JSON value, keeping the path to where it is, and
// records the first key its input type has no field for (CheckJSON).
//
// It reads the bytes as they come and stops, reporting false, at anything
// it does not expect. It does not validate the document: CheckJSON leaves
// that to json.Valid once it has something to report. encoding/json has no
// walk over an object's keys that does not allocate each token.
type keyWalk struct {
	data  []byte
	i     int
	p     InputPolicy
	depth int                   // the path's length
	path  [inlineSteps]pathStep // where the walk is: its first steps
	more  []pathStep            // and the others
	found *pipeline.Error
}

// inlineSteps is how many steps of a path keyWalk holds without
// allocating.
const inlineSteps = 32

// pathStep is one step of a path: an object key, data[start:end] quoted
// (escaped: to be decoded), or an array index.
type pathStep struct {
	start, end int
	index      int
	isIndex    bool
	escaped    bool
}

// push adds s to the path.
func (w *keyWalk) push(s pathStep) {
	if w.depth < inlineSteps {
		w.path[w.depth] = s
	} else {
		w.more = append(w.more, s)
	}
	w.depth++
}

// pop removes the path's last step.
func (w *keyWalk) pop() {
	w.depth--
	if w.depth >= inlineSteps {
		w.more = w.more[:len(w.more)-1]
	}
}

// step returns the path's i-th step.
func (w *keyWalk) step(i int) pathStep {
	if i < inlineSteps {
		return w.path[i]
	}
	return w.more[i-inlineSteps]
}

// key returns the key of step s, decoded.
func (w *keyWalk) key(s pathStep) []byte {
	return decodeKey(w.data[s.start:s.end], s.escaped)
}

// maxWalkDepth is encoding/json's own nesting limit: a deeper document
// is not valid to it.
const maxWalkDepth = 10000

// value walks the value at w.i, checked against t (nil: not checked), and
// reports whether it ended where a value can end.
func (w *keyWalk) value(t reflect.Type) bool {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if !w.skipSpace() || w.depth > maxWalkDepth {
		return false
	}
	switch w.data[w.i] {
	case '{':
		return w.object(t)
	case '[':
		return w.array(t)
	case '"':
		_, ok := w.str()
		return ok
	}
	return w.scalar()
}

// object walks the object at w.i.
func (w *keyWalk) object(t reflect.Type) bool {
	if t != nil && t.Kind() != reflect.Struct && t.Kind() != reflect.Map {
		t = nil
	}
	w.i++ // {
	if w.skipSpace() && w.data[w.i] == '}' {
		w.i++
		return true
	}
	for {
		if !w.skipSpace() || w.data[w.i] != '"' {
			return false
		}
		start := w.i + 1
		escaped, ok := w.str()
		key := pathStep{start: start, end: w.i - 1, escaped: escaped} // w.i is past the closing quote
		if !ok || !w.skipSpace() || w.data[w.i] != ':' {
			return false
		}
		w.i++
		w.push(key)
		if !w.value(w.member(t, w.key(key))) {
			return false
		}
		w.pop()
		if end, ok := w.after('}'); !ok || end {
			return ok
		}
	}
}

// member returns the type of key's value in an object of type t (nil: not
// checked), and records an unknown key of a struct.
func (w *keyWalk) member(t reflect.Type, key []byte) reflect.Type {
	if t == nil {
		return nil
	}
	if t.Kind() == reflect.Map {
		return t.Elem()
	}
	fields := jsonFields(t)
	if ft, ok := fields.exact[string(key)]; ok {
		return ft
	}
	exact, folded := fields.folded[strings.ToLower(string(key))]
	if folded && w.p.FoldKeyCase {
		return fields.exact[exact]
	}
	if w.found == nil { // (CheckJSON walks only when unknown fields are refused)
		at := w.pathString()
		hint := ""
		if folded {
			hint = at[:len(at)-len(key)] + exact
		}
		w.found = UnknownField(at, hint)
	}
	return nil
}

// array walks the array at w.i.
func (w *keyWalk) array(t reflect.Type) bool {
	var elem reflect.Type
	if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
		elem = t.Elem()
	}
	w.i++ // [
	if w.skipSpace() && w.data[w.i] == ']' {
		w.i++
		return true
	}
	for n := 0; ; n++ {
		w.push(pathStep{index: n, isIndex: true})
		if !w.value(elem) {
			return false
		}
		w.pop()
		if end, ok := w.after(']'); !ok || end {
			return ok
		}
	}
}

// after reads what follows a member or an element: a comma (another
// follows) or close (the end).
func (w *keyWalk) after(close byte) (end, ok bool) {
	if !w.skipSpace() {
		return false, false
	}
	switch w.data[w.i] {
	case ',':
		w.i++
		return false, true
	case close:
		w.i++
		return true, true
	}
	return false, false
}

// str reads the string at w.i and reports whether it holds an escape or
// a non-ASCII byte (to be decoded as encoding/json decodes them).
func (w *keyWalk) str() (escaped, ok bool) {
	for i := w.i + 1; i < len(w.data); i++ {
		switch c := w.data[i]; {
		case c == '"':
			w.i = i + 1
			return escaped, true
		case c == '\\':
			escaped = true
			i++ // the escaped byte cannot end the string
		case c >= 0x80:
			escaped = true
		}
	}
	return false, false
}

// scalar skips a number or a literal: everything up to the next
// delimiter, which must follow something.
func (w *keyWalk) scalar() bool {
	start := w.i
	for ; w.i < len(w.data); w.i++ {
		switch w.data[w.i] {
		case ',', ']', '}', ' ', '\t', '\r', '\n':
			return w.i > start
		}
	}
	return w.i > start
}

// skipSpace skips JSON white space and reports whether anything follows.
func (w *keyWalk) skipSpace() bool {
	for w.i < len(w.data) {
		switch w.data[w.i] {
		case ' ', '\t', '\r', '\n':
			w.i++
		default:
			return true
		}
	}
	return false
}

// pathString returns the walk's path as CheckJSON reports it:
// "lines[1].sku".
func (w *keyWalk) pathString() string {
	var b strings.Builder
	for i := range w.depth {
		s := w.step(i)
		if s.isIndex {
			b.WriteString("[" + strconv.Itoa(s.index) + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.Write(w.key(s))
	}
	return b.String()
}

// decodeKey returns the key whose quoted bytes are raw: raw itself, or,
// when it holds an escape or a non-ASCII byte, what encoding/json decodes
// it to (an invalid string decodes to nothing: CheckJSON reports nothing
// for an invalid document).
func decodeKey(raw []byte, escaped bool) []byte {
	if !escaped {
		return raw
	}
	var s string
	q := make([]byte, 0, len(raw)+2)
	q = append(append(append(q, '"'), raw...), '"')
	_ = json.Unmarshal(q, &s)
	return []byte(s)
}
