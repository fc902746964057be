package httpadapter

import (
	"bytes"
	"context"
	"encoding"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"strings"

	"github.com/sundial-go/sundial/kernel/client"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
)

// maxReplyBody bounds the body of a success a client transport reads.
const maxReplyBody = 32 << 20

// ClientTransport returns the client.Transport of the operations in reg,
// served by Mount at base, such as "http://billing:8080". A call goes to
// the operation's method and path. Path parameters come from the input's
// fields. The input goes as query parameters for GET, HEAD and DELETE,
// and as a JSON body otherwise. A failed answer becomes its outcome, as
// FromResponse makes it, without DetailDownstreamStatus.
//
// Requests go through a Transport over rt (nil: http.DefaultTransport),
// or through rt itself when it is a *Transport. So each attempt carries
// the deadline, the W3C trace context and the baggage. Give the outbound
// policy to the client (client.WithDependency), not to rt.
func ClientTransport(reg *operations.Registry, base string, rt http.RoundTripper) client.Transport {
	t, ok := rt.(*Transport)
	if !ok {
		t = NewTransport(rt)
	}
	return &clientTransport{reg: reg, base: strings.TrimSuffix(base, "/"), t: t}
}

type clientTransport struct {
	reg  *operations.Registry
	base string
	t    *Transport
}

// Bind implements client.Transport.
func (c *clientTransport) Bind(id string) (*operations.Descriptor, func(ctx context.Context, in, out any) error, error) {
	if c.reg == nil {
		return nil, nil, fmt.Errorf("httpadapter: client of %q: nil registry", id)
	}
	d, ok := c.reg.Lookup(id)
	if !ok {
		return nil, nil, fmt.Errorf("httpadapter: client: the registry has no operation %q", id)
	}
	if d.Method == "" {
		return nil, nil, fmt.Errorf("httpadapter: client: operation %q has no HTTP method and path", id)
	}
	b, err := newBinder(d.Input, d.Method, pathParams(d.Path))
	if err != nil {
		return nil, nil, fmt.Errorf("httpadapter: client of %q: %w", id, err)
	}
	call := &clientCall{c: c, d: d, b: b, query: d.Method == http.MethodGet ||
		d.Method == http.MethodHead || d.Method == http.MethodDelete}
	return d, call.send, nil
}

// clientCall sends the calls of one operation.
type clientCall struct {
	c     *clientTransport
	d     *operations.Descriptor
	b     *binder
	query bool // the input goes in the query, not the body
}

// send sends one attempt with the input in (a pointer) and decodes the
// reply into out (a pointer).
func (cc *clientCall) send(ctx context.Context, in, out any) error {
	v := reflect.ValueOf(in)
	for v.Kind() == reflect.Pointer && !v.IsNil() {
		v = v.Elem()
	}
	u := cc.c.base + cc.b.expand(cc.d.Path, v)
	var body io.Reader
	if cc.query {
		if q := cc.b.encodeQuery(v); len(q) > 0 {
			u += "?" + q.Encode()
		}
	} else {
		data, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, cc.d.Method, u, body)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := cc.c.t.sendTracked(req)
	if err != nil {
		return err
	}
	if resp.StatusCode >= 400 {
		return answerOf(resp)
	}
	defer func() {
		// What is left (a trailing newline) is read, so the connection is reused.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxProblemBody))
		resp.Body.Close()
	}()
	if resp.StatusCode == http.StatusNoContent || cc.d.Method == http.MethodHead {
		return nil
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxReplyBody)).Decode(out); err != nil {
		return pipeline.Wrap(pipeline.KindUnexpected, pipeline.CodeUnexpected,
			fmt.Sprintf("httpadapter: the reply of %q does not decode", cc.d.ID), err)
	}
	return nil
}

// expand returns the path template with its parameters filled from the
// input struct v, each escaped.
func (b *binder) expand(path string, v reflect.Value) string {
	if len(b.params) == 0 {
		return path
	}
	segs := strings.Split(path, "/")
	for i, seg := range segs {
		name, ok := strings.CutPrefix(seg, ":")
		if !ok && seg != "*" {
			continue
		}
		if !ok {
			name = "*"
		}
		for _, p := range b.params {
			if p.param != name {
				continue
			}
			vals := paramStrings(inputField(v, p.index))
			s := ""
			if len(vals) > 0 {
				s = vals[0]
			}
			if name == "*" {
				parts := strings.Split(s, "/")
				for j := range parts {
					parts[j] = url.PathEscape(parts[j])
				}
				segs[i] = strings.Join(parts, "/")
			} else {
				segs[i] = url.PathEscape(s)
			}
		}
	}
	return strings.Join(segs, "/")
}

// encodeQuery returns the query parameters of the input struct v: each
// query field that is not its zero value.
func (b *binder) encodeQuery(v reflect.Value) url.Values {
	var q url.Values
	for name, ref := range b.query {
		f := inputField(v, ref.index)
		if !f.IsValid() || f.IsZero() {
			continue
		}
		if q == nil {
			q = url.Values{}
		}
		q[name] = paramStrings(f)
	}
	return q
}

// inputField returns the field of struct v at index, or the zero Value
// through a nil embedded pointer.
func inputField(v reflect.Value, index []int) reflect.Value {
	if v.Kind() != reflect.Struct {
		return reflect.Value{}
	}
	f, err := v.FieldByIndexErr(index)
	if err != nil {
		return reflect.Value{}
	}
	return f
}

var textMarshalerType = reflect.TypeFor[encoding.TextMarshaler]()

// paramStrings formats a parameter field as setString reads it: a slice
// gives one string per element, a nil pointer none.
func paramStrings(f reflect.Value) []string {
	if !f.IsValid() {
		return nil
	}
	if f.Type().Implements(textMarshalerType) && (f.Kind() != reflect.Pointer || !f.IsNil()) {
		b, err := f.Interface().(encoding.TextMarshaler).MarshalText()
		if err != nil {
			return nil
		}
		return []string{string(b)}
	}
	switch f.Kind() {
	case reflect.Pointer:
		if f.IsNil() {
			return nil
		}
		return paramStrings(f.Elem())
	case reflect.Slice:
		out := make([]string, 0, f.Len())
		for i := range f.Len() {
			out = append(out, paramStrings(f.Index(i))...)
		}
		return out
	case reflect.String:
		return []string{f.String()}
	case reflect.Bool:
		return []string{strconv.FormatBool(f.Bool())}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return []string{strconv.FormatInt(f.Int(), 10)}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return []string{strconv.FormatUint(f.Uint(), 10)}
	case reflect.Float32, reflect.Float64:
		return []string{strconv.FormatFloat(f.Float(), 'g', -1, f.Type().Bits())}
	}
	return nil
}
