package httpadapter

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/sundial-go/sundial/adapters/internal/outcome"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
)

// ContentTypeProblem is the media type of every failure response.
const ContentTypeProblem = "application/problem+json"

// Codes of the failures the adapter itself produces, before or around the
// pipeline. The kernel's codes (pipeline.Code*) cover the rest.
const (
	// codeMalformedBody: the request body is not valid JSON.
	codeMalformedBody = "HTTP_VALIDATION_001"
	// codeWrongType: a body member, path parameter or query parameter has
	// the wrong type for its field.
	codeWrongType = "HTTP_VALIDATION_002"
	// codeBodyTooLarge: the request body is over the limit (status 413).
	codeBodyTooLarge = "HTTP_VALIDATION_003"
	// codeBadRequest: an *echo.HTTPError with another 4xx status, from echo
	// or from an application route.
	codeBadRequest = "HTTP_VALIDATION_004"
	// codeUnavailable: an *echo.HTTPError with status 429 or 503 (echo's
	// rate limiter and timeout middleware use them).
	codeUnavailable = "HTTP_UNAVAILABLE_001"
	// codeRouteNotFound: no route matches the path (status 404).
	codeRouteNotFound = "HTTP_NOT_FOUND_001"
	// codeMethodNotAllowed: a route matches the path but not the method
	// (status 405, with an Allow header).
	codeMethodNotAllowed = "HTTP_NOT_FOUND_002"
)

// Problem is an RFC 9457 Problem Details body, as the adapter writes it for
// every failure. Members always appear, in this order; Details is an empty
// object when the outcome has none, and TraceID is empty when neither a
// tracer nor the caller gave the call a trace.
type Problem struct {
	// Type is "urn:sundial:error:" followed by Code.
	Type string `json:"type"`
	// Title is the outcome's kind, e.g. "UNAVAILABLE".
	Title string `json:"title"`
	// Status is the HTTP status of the response.
	Status int `json:"status"`
	// Detail is the outcome's message; for UNEXPECTED it is always
	// pipeline.UnexpectedMessage.
	Detail string `json:"detail"`
	// Instance is the request path.
	Instance string `json:"instance"`
	// Code is the outcome's stable code, e.g. "KERNEL_UNAVAILABLE_002".
	Code string `json:"code"`
	// TraceID is the W3C trace ID of the invocation's span when a tracer
	// is installed, else the caller's (an incoming traceparent), else "".
	TraceID string `json:"traceId"`
	// Details are the outcome's details, e.g. {"id": ..., "retryAfter": 60}.
	// UNEXPECTED outcomes never carry any. A KERNEL_VALIDATION_007
	// outcome lists its failing fields under "errors" (see Violations).
	Details map[string]any `json:"details"`
}

// Violations returns the failing fields of a KERNEL_VALIDATION_007
// Problem, details.errors, whether p was built or decoded from JSON; nil
// when it has none or they do not decode. Field is a JSON pointer (RFC
// 6901), e.g. "/lines/0/sku".
func (p *Problem) Violations() []operations.Violation {
	switch v := p.Details[operations.DetailViolations].(type) {
	case []operations.Violation:
		return v
	case nil:
		return nil
	default:
		b, err := json.Marshal(v)
		var vs []operations.Violation
		if err != nil || json.Unmarshal(b, &vs) != nil {
			return nil
		}
		return vs
	}
}

// jsonPointer turns a path ("lines[1].sku") into a JSON pointer
// ("/lines/1/sku"), escaping '~' and '/' in names.
func jsonPointer(path string) string { return outcome.JSONPointer(path) }

var emptyDetails = map[string]any{}

// newProblem builds the Problem of a failure with the given status. An
// UNEXPECTED outcome (unknown kinds included) shows nothing of its message
// or details; an outcome with a retry-after has it as details.retryAfter,
// in whole seconds, and a constraint outcome names its failing fields in
// details.errors by JSON pointers.
func newProblem(e *pipeline.Error, status int, instance, traceID string) *Problem {
	details := outcome.Details(outcome.NameFields(e, jsonPointer))
	if len(details) == 0 {
		details = emptyDetails
	}
	return &Problem{
		Type:     outcome.TypePrefix + e.Code(),
		Title:    e.Kind().String(),
		Status:   status,
		Detail:   outcome.SafeMessage(e),
		Instance: instance,
		Code:     e.Code(),
		TraceID:  traceID,
		Details:  details,
	}
}

// writeProblem writes e as Problem Details with the given status (0: the
// kind's status). An outcome with a retry-after also gets a Retry-After
// header, in whole seconds. For HEAD requests only the headers are
// written.
func writeProblem(c echo.Context, e *pipeline.Error, status int, traceID string) error {
	if status == 0 {
		status = StatusFor(e.Kind())
	}
	r := c.Request()
	h := c.Response().Header()
	if s, ok := outcome.RetryAfterSeconds(e); ok && e.Kind() != pipeline.KindUnexpected {
		h.Set("Retry-After", strconv.FormatInt(s, 10))
	}
	p := newProblem(e, status, r.URL.Path, traceID)
	body, err := json.Marshal(p)
	if err != nil {
		// Details that do not encode: send the problem without them
		// rather than fail the response.
		p.Details = emptyDetails
		body, _ = json.Marshal(p)
	}
	h.Set(echo.HeaderContentType, ContentTypeProblem)
	if r.Method == http.MethodHead {
		c.Response().WriteHeader(status)
		return nil
	}
	h.Set(echo.HeaderContentLength, strconv.Itoa(len(body)))
	c.Response().WriteHeader(status)
	_, err = c.Response().Write(body)
	return err
}
