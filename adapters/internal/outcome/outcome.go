// Package outcome holds what every adapter shows of an outcome in the same
// way. That is its safe message and details, the type of its Problem
// Details, and each protocol's value for each kind.
package outcome

import "github.com/sundial-go/sundial/pipeline"

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
// under [pipeline.DetailRetryAfter]. It is nil when there are none. The map
// is a copy: the caller may change it.
func Details(e *pipeline.Error) map[string]any {
	details := SafeDetails(e)
	if s, ok := e.RetryAfterSeconds(); ok && e.Kind() != pipeline.KindUnexpected {
		if details == nil {
			details = make(map[string]any, 1)
		}
		details[pipeline.DetailRetryAfter] = s
	}
	return details
}
