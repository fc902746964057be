package httpadapter

import (
	"github.com/sundial-go/sundial/adapters/internal/outcome"
	"github.com/sundial-go/sundial/pipeline"
)

// statuses is the outcome table's HTTP column (outcome.HTTPStatus).
var statuses = outcome.HTTPStatus

// StatusFor returns the HTTP status of a failure kind, from the outcome
// table of docs/pipeline.md. KindOK maps to 200. UNEXPECTED and any
// unknown kind map to 500. An operation's descriptor chooses its success
// status.
func StatusFor(k pipeline.Kind) int {
	return statuses.For(k)
}
