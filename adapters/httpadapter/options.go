package httpadapter

import (
	"log/slog"
	"net/http"
)

// defaultBodyLimit is the largest request body accepted when
// WithBodyLimit is not given: 1 MiB.
const defaultBodyLimit = 1 << 20

// defaultBaggageLimit is the largest W3C baggage header accepted when
// WithBaggageLimit is not given: 8192 bytes, the W3C limit.
const defaultBaggageLimit = 8192

// maxIdempotencyKey bounds the Idempotency-Key header's key: a longer one
// is a 400 KERNEL_VALIDATION_005.
const maxIdempotencyKey = 255

// Option configures Mount.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	logger          *slog.Logger
	bodyLimit       int64
	relHeader       string
	callerDeadlines bool
	baggageLimit    int
	errorHandler    bool
}

func defaultConfig() config {
	return config{
		bodyLimit:       defaultBodyLimit,
		relHeader:       DefaultRelativeDeadlineHeader,
		callerDeadlines: true,
		baggageLimit:    defaultBaggageLimit,
		errorHandler:    true,
	}
}

// WithLogger sets the logger of the access log (one record per request,
// message "http request") and of the adapter's own events (dropped
// baggage). The default is the kernel's logger, which also has the
// kernel's own records, such as a straggler's late result. A nil logger is
// ignored. Give it a slog.JSONHandler for JSON lines.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) {
		if l != nil {
			c.logger = l
		}
	})
}

// WithBodyLimit sets the largest request body, in bytes, that an operation
// route reads; a larger body is a 413 Problem Details (code
// HTTP_VALIDATION_003). The default is 1 MiB; n <= 0
// keeps the default.
func WithBodyLimit(n int64) Option {
	return optionFunc(func(c *config) {
		if n > 0 {
			c.bodyLimit = n
		}
	})
}

// WithRelativeDeadlineHeader sets the name of the header carrying the
// relative form of the caller's deadline (milliseconds remaining). The
// default is DefaultRelativeDeadlineHeader ("Sundial-Timeout-Ms"); the
// empty name turns the relative form off, so only Sundial-Deadline is read.
func WithRelativeDeadlineHeader(name string) Option {
	return optionFunc(func(c *config) {
		if name == "" {
			c.relHeader = ""
			return
		}
		c.relHeader = http.CanonicalHeaderKey(name)
	})
}

// WithCallerDeadlines says whether the caller's deadline headers are read
// (the default, true). Pass false on an edge that faces untrusted callers:
// their headers are then ignored — not even validated — and every
// invocation gets the operation's TimeoutSeconds, capped by
// MaxTimeoutSeconds, as if the caller had sent none. Caller deadlines are
// capped by the same limits either way.
func WithCallerDeadlines(trust bool) Option {
	return optionFunc(func(c *config) { c.callerDeadlines = trust })
}

// WithBaggageLimit sets the largest W3C baggage header, in bytes, that is
// read at all. A larger header is dropped whole, before it is parsed, with
// a warning in the log; the request goes on without baggage. What is read
// is copied onto the invocation by the kernel, within propagation.Baggage's
// bounds (32 members, 4096 bytes). The default is 8192 bytes (the W3C
// limit); n <= 0 keeps it.
func WithBaggageLimit(n int) Option {
	return optionFunc(func(c *config) {
		if n > 0 {
			c.baggageLimit = n
		}
	})
}

// WithErrorHandler says whether Mount installs the adapter's
// HTTPErrorHandler on the echo instance (the default, true), so that
// echo's own errors (no route, 405, errors returned by the application's
// echo handlers) are Problem Details too. Pass false to keep echo's
// handler, or one of your own, which can call Adapter.HTTPErrorHandler.
func WithErrorHandler(install bool) Option {
	return optionFunc(func(c *config) { c.errorHandler = install })
}
