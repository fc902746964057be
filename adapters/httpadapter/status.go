package httpadapter

import (
	"net/http"

	"github.com/sundial-go/sundial/adapters/internal/outcome"
	"github.com/sundial-go/sundial/pipeline"
)

// statuses is the outcome table's HTTP column. A downstream's 410 reads as
// NOT_FOUND and its 429 as UNAVAILABLE.
var statuses = outcome.NewTable(http.StatusInternalServerError, map[pipeline.Kind]int{
	pipeline.KindOK:              http.StatusOK,
	pipeline.KindValidation:      http.StatusBadRequest,
	pipeline.KindUnauthenticated: http.StatusUnauthorized,
	pipeline.KindForbidden:       http.StatusForbidden,
	pipeline.KindNotFound:        http.StatusNotFound,
	pipeline.KindConflict:        http.StatusConflict,
	pipeline.KindUnprocessable:   http.StatusUnprocessableEntity,
	pipeline.KindCanceled:        http.StatusRequestTimeout,
	pipeline.KindTimeout:         http.StatusGatewayTimeout,
	pipeline.KindUnavailable:     http.StatusServiceUnavailable,
}, map[int]pipeline.Kind{
	http.StatusGone:            pipeline.KindNotFound,
	http.StatusTooManyRequests: pipeline.KindUnavailable,
})

// StatusFor returns the HTTP status of a failure kind, from the outcome
// table of docs/pipeline.md. KindOK maps to 200. UNEXPECTED and any
// unknown kind map to 500. An operation's descriptor chooses its success
// status.
func StatusFor(k pipeline.Kind) int {
	return statuses.For(k)
}
