// Package httpadapter serves Sundial operations over HTTP on echo v4 and
// carries deadlines in (the Sundial-Deadline header) and out (a
// RoundTripper for http.Client).
package httpadapter
