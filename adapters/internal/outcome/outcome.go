// Package outcome holds what every adapter shows of an outcome in the same
// way. That is its safe message and details, the type of its Problem
// Details, and each protocol's value for each kind.
package outcome

import (
	"strings"
	"time"

	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
)

// TypePrefix prefixes a code to make a Problem's type.
const TypePrefix = "urn:sundial:error:"

// SafeMessage returns the message a caller may see. It is
// [pipeline.UnexpectedMessage] for an UNEXPECTED outcome, a nil e included,
// and the outcome's message otherwise.
func SafeMessage(e *pipeline.Error) string {
	if e.Kind() == pipeline.KindUnexpected {
		return pipeline.UnexpectedMessage
	}
	return e.Message()
}

// SafeDetails returns the details a caller may see. It is nil for an
// UNEXPECTED outcome and a copy of the details otherwise.
func SafeDetails(e *pipeline.Error) map[string]any {
	if e.Kind() == pipeline.KindUnexpected {
		return nil
	}
	return e.Details()
}

// Details returns [SafeDetails] with the retry-after, in whole seconds,
// under [DetailRetryAfter]. It is nil when there are none. The map
// is a copy: the caller may change it.
func Details(e *pipeline.Error) map[string]any {
	details := SafeDetails(e)
	if s, ok := RetryAfterSeconds(e); ok && e.Kind() != pipeline.KindUnexpected {
		if details == nil {
			details = make(map[string]any, 1)
		}
		details[DetailRetryAfter] = s
	}
	return details
}

// NameFields returns e with each failing field of its constraint outcome
// named name(path), where path is the field's path in JSON names
// ("lines[1].sku"). Adapters name fields as their callers know them: a
// JSON pointer over HTTP, a flag on the CLI. An e without violations is
// returned as it is.
func NameFields(e *pipeline.Error, name func(path string) string) *pipeline.Error {
	vs := operations.Violations(e)
	if vs == nil {
		return e
	}
	out := make([]operations.Violation, len(vs))
	for i, v := range vs {
		v.Field = name(v.Field)
		out[i] = v
	}
	return e.WithDetail(operations.DetailViolations, out)
}

// DetailRetryAfter is the details key under which adapters write an
// outcome's retry-after on the wire, in whole seconds.
const DetailRetryAfter = "retryAfter"

// RetryAfterSeconds returns e's retry-after in whole seconds, rounded up
// and at least 1 (what a Retry-After header can say), and whether e has
// one.
func RetryAfterSeconds(e *pipeline.Error) (int64, bool) {
	d, ok := e.RetryAfter()
	if !ok {
		return 0, false
	}
	return max(1, int64((d+time.Second-1)/time.Second)), true
}

// pointerEscapes turns a path in JSON names into a JSON pointer's tail.
var pointerEscapes = strings.NewReplacer("~", "~0", "/", "~1", "[", "/", "].", "/", "]", "", ".", "/")

// JSONPointer turns a path ("lines[1].sku") into a JSON pointer (RFC
// 6901, "/lines/1/sku"), escaping '~' and '/' in names.
func JSONPointer(path string) string { return "/" + pointerEscapes.Replace(path) }
