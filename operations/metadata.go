package operations

import (
	"context"
	"net/http"
	"sync"
)

// Metadata is the protocol metadata of one call: the caller's request
// headers, and the response headers and trailers its handler sets. Over
// HTTP they are headers; over gRPC, header and trailer metadata; over
// Connect and gRPC-Web, headers and trailers. A handler reaches it with
// MetadataFrom. Its methods are safe for concurrent use, and a nil
// Metadata reads as empty and drops what is set on it.
type Metadata struct {
	load            func() http.Header // the request headers, read once
	in              http.Header
	once            sync.Once
	mu              sync.Mutex
	header, trailer http.Header
	headerSent      bool
	trailerSent     bool
}

type metadataKey struct{}

// WithMetadata returns a copy of ctx that carries new metadata for a
// call. request returns the call's request headers, such as gRPC
// metadata; it is called once, when they are first read, and must not
// be modified after. An adapter calls WithMetadata before it runs the
// call, and sends what the handler set with SendHeader and SendTrailer.
func WithMetadata(ctx context.Context, request func() http.Header) (context.Context, *Metadata) {
	m := &Metadata{load: request}
	return context.WithValue(ctx, metadataKey{}, m), m
}

// MetadataFrom returns the metadata of the call whose context is ctx. It
// returns nil when the call's protocol has none, as on the CLI.
func MetadataFrom(ctx context.Context) *Metadata {
	m, _ := ctx.Value(metadataKey{}).(*Metadata)
	return m
}

// Request returns the caller's request headers, keys in canonical form.
// The caller must not modify them.
func (m *Metadata) Request() http.Header {
	if m == nil {
		return http.Header{}
	}
	m.once.Do(func() {
		if m.load != nil {
			m.in = m.load()
		}
		for k := range m.in {
			if c := http.CanonicalHeaderKey(k); c != k {
				m.in = canonical(m.in)
				break
			}
		}
		if m.in == nil {
			m.in = http.Header{}
		}
	})
	return m.in
}

// canonical returns a copy of h with its keys in canonical form.
func canonical(h http.Header) http.Header {
	out := make(http.Header, len(h))
	for k, vs := range h {
		c := http.CanonicalHeaderKey(k)
		out[c] = append(out[c], vs...)
	}
	return out
}

// AddHeader adds values to the response header key. A header added once
// the headers were sent is dropped.
func (m *Metadata) AddHeader(key string, values ...string) {
	if m != nil {
		m.add(&m.header, &m.headerSent, key, values)
	}
}

// AddTrailer adds values to the response trailer key. A trailer added
// once the trailers were sent is dropped.
func (m *Metadata) AddTrailer(key string, values ...string) {
	if m != nil {
		m.add(&m.trailer, &m.trailerSent, key, values)
	}
}

func (m *Metadata) add(h *http.Header, sent *bool, key string, values []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if *sent {
		return
	}
	if *h == nil {
		*h = make(http.Header)
	}
	for _, v := range values {
		h.Add(key, v)
	}
}

// SendHeader returns the response headers set so far, and drops those set
// later. An adapter calls it when it sends the headers.
func (m *Metadata) SendHeader() http.Header {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.headerSent = true
	return m.header
}

// SendTrailer returns the response trailers set so far, and drops the
// headers and trailers set later. An adapter calls it when it answers.
func (m *Metadata) SendTrailer() http.Header {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.headerSent, m.trailerSent = true, true
	return m.trailer
}
