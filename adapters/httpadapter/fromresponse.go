package httpadapter

import (
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sundial-go/sundial/adapters/internal/outcome"
	"github.com/sundial-go/sundial/pipeline"
)

// maxProblemBody bounds the body FromResponse reads: a Problem is small,
// and a downstream must not make the caller buffer without bound.
const maxProblemBody = 64 << 10

// maxRetryAfter bounds a Retry-After FromResponse believes (a larger one is
// this long: a caller's deadline ends well before).
const maxRetryAfter = 24 * time.Hour

// DetailDownstreamStatus is the details key FromResponse sets to the HTTP
// status of the downstream's answer, so that a downstream 504 stays
// distinct from the caller's own deadline.
const DetailDownstreamStatus = "downstreamStatus"

// FromResponse converts a failed HTTP answer of a downstream service to an
// outcome, as grpcadapter.FromStatus does for gRPC: nil for a status below
// 400, otherwise a *pipeline.Error. It reads (at most 64 KiB of) the body
// and closes it.
//
// A Problem Details body (application/problem+json, as the adapter writes
// it) gives the outcome its kind (the title; else the status's), code,
// message (the detail), and details; any other body gives the status's
// kind, code "HTTP_<status>" (e.g. HTTP_503) and the status text. The
// retry-after is the Retry-After header (seconds or an HTTP date), else
// details.retryAfter. The details also carry DetailDownstreamStatus, and the
// outcome never wraps context.DeadlineExceeded: a downstream's 504 TIMEOUT
// is not the caller's own deadline (errors.Is tells them apart).
func FromResponse(resp *http.Response) error {
	if resp == nil || resp.StatusCode < 400 {
		return nil
	}
	return answerOf(resp).WithDetail(DetailDownstreamStatus, resp.StatusCode)
}

// answerOf is the outcome of a failed answer, as FromResponse makes it
// but without DetailDownstreamStatus. It reads the body and closes it.
func answerOf(resp *http.Response) *pipeline.Error {
	var body []byte
	if resp.Body != nil {
		body, _ = io.ReadAll(io.LimitReader(resp.Body, maxProblemBody))
		resp.Body.Close()
	}
	e := fromProblem(resp, body)
	if ra, ok := retryAfterOf(resp.Header.Get("Retry-After")); ok {
		e = e.WithRetryAfter(ra)
	}
	return e
}

// fromProblem builds the outcome of a failed answer from its body.
func fromProblem(resp *http.Response, body []byte) *pipeline.Error {
	kind := kindForStatus(resp.StatusCode)
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	var p Problem
	if mt != ContentTypeProblem || json.Unmarshal(body, &p) != nil || p.Code == "" {
		return pipeline.NewError(kind, "HTTP_"+strconv.Itoa(resp.StatusCode), http.StatusText(resp.StatusCode))
	}
	if k, ok := outcome.ParseKind(p.Title); ok && k != pipeline.KindOK {
		kind = k
	}
	e := pipeline.NewError(kind, p.Code, p.Detail)
	for k, v := range p.Details {
		if k != outcome.DetailRetryAfter {
			e = e.WithDetail(k, v)
		}
	}
	if s, ok := p.Details[outcome.DetailRetryAfter].(float64); ok && s >= 0 {
		e = e.WithRetryAfter(min(time.Duration(s*float64(time.Second)), maxRetryAfter))
	}
	return e
}

// retryAfterOf parses a Retry-After header: delta-seconds or an HTTP date.
// Without one (or with one that does not parse) the body's stands.
func retryAfterOf(h string) (time.Duration, bool) {
	h = strings.TrimSpace(h)
	if h == "" {
		return 0, false
	}
	if s, err := strconv.ParseInt(h, 10, 64); err == nil {
		if s < 0 {
			return 0, false
		}
		return min(time.Duration(min(s, int64(maxRetryAfter/time.Second)))*time.Second, maxRetryAfter), true
	}
	if t, err := http.ParseTime(h); err == nil {
		return min(max(time.Until(t), 0), maxRetryAfter), true
	}
	return 0, false
}

// kindForStatus is the outcome kind of an HTTP status. It inverts
// StatusFor where StatusFor is one-to-one; 410 is NOT_FOUND and 429 is
// UNAVAILABLE. Any other 4xx is VALIDATION, any other 5xx UNEXPECTED.
func kindForStatus(status int) pipeline.Kind {
	if k, ok := statuses.KindOf(status); ok && k != pipeline.KindOK {
		return k
	}
	if status < 500 {
		return pipeline.KindValidation
	}
	return pipeline.KindUnexpected
}
