// Package header names the response headers the server owns on every
// protocol. A handler's fields and metadata may not set them.
package header

import "strings"

// Owned reports whether the header name belongs to the server on every
// protocol, in any letter case. These are Host and the hop-by-hop
// headers (RFC 9110 section 7.6.1, RFC 9113 section 8.2.2). A strict
// HTTP/2 peer resets a stream that carries one of those. They include the
// headers that frame the body as the server wrote it: Content-Type,
// Content-Length and Content-Encoding. A protocol may own more.
func Owned(name string) bool {
	switch strings.ToLower(name) {
	case "connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding",
		"upgrade", "host", "content-type", "content-length", "content-encoding":
		return true
	}
	return false
}
