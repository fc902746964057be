package httpadapter

import (
	"net/http"

	"github.com/sundial-go/sundial/pipeline"
)

// StatusFor returns the HTTP status of a failure kind (the outcome table
// of docs/pipeline.md). KindOK maps to 200, and an unknown kind, like
// UNEXPECTED, to 500; the success status of an operation is chosen by its
// descriptor.
func StatusFor(k pipeline.Kind) int {
	switch k {
	case pipeline.KindOK:
		return http.StatusOK
	case pipeline.KindValidation:
		return http.StatusBadRequest
	case pipeline.KindUnauthenticated:
		return http.StatusUnauthorized
	case pipeline.KindForbidden:
		return http.StatusForbidden
	case pipeline.KindNotFound:
		return http.StatusNotFound
	case pipeline.KindConflict:
		return http.StatusConflict
	case pipeline.KindUnprocessable:
		return http.StatusUnprocessableEntity
	case pipeline.KindCanceled:
		return http.StatusRequestTimeout
	case pipeline.KindTimeout:
		return http.StatusGatewayTimeout
	case pipeline.KindUnavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}
