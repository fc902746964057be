package outcome

import (
	"net/http"

	"github.com/sundial-go/sundial/pipeline"
)

// numKinds is the size of the closed set of kinds.
const numKinds = int(pipeline.KindUnexpected) + 1

// Table gives each outcome kind a protocol's value, such as an HTTP status,
// a gRPC code or an exit code. It also maps values back to kinds.
type Table[T comparable] struct {
	of    [numKinds]T
	other T
	kinds map[T]pipeline.Kind
}

// NewTable returns the table of the values in of. A kind without a value,
// and any value outside the closed set of kinds, has other. KindOf inverts
// of, the first kind in table order winning a shared value, and adds
// aliases.
func NewTable[T comparable](other T, of map[pipeline.Kind]T, aliases map[T]pipeline.Kind) *Table[T] {
	t := &Table[T]{other: other, kinds: make(map[T]pipeline.Kind, len(of)+len(aliases))}
	for k := range t.of {
		v, ok := of[pipeline.Kind(k)]
		if !ok {
			t.of[k] = other
			continue
		}
		t.of[k] = v
		if _, dup := t.kinds[v]; !dup {
			t.kinds[v] = pipeline.Kind(k)
		}
	}
	for v, k := range aliases {
		t.kinds[v] = k
	}
	return t
}

// For returns the value of kind k.
func (t *Table[T]) For(k pipeline.Kind) T {
	if int(k) < len(t.of) {
		return t.of[k]
	}
	return t.other
}

// KindOf returns the kind of value v, and false when no kind has it.
func (t *Table[T]) KindOf(v T) (pipeline.Kind, bool) {
	k, ok := t.kinds[v]
	return k, ok
}

// ParseKind returns the kind named s, as its String method prints it.
func ParseKind(s string) (pipeline.Kind, bool) {
	for k := range pipeline.Kind(numKinds) {
		if k.String() == s {
			return k, true
		}
	}
	return pipeline.KindUnexpected, false
}

// HTTPStatus is the outcome table's HTTP column. A downstream's 410 reads
// as NOT_FOUND and its 429 as UNAVAILABLE. The HTTP adapter answers with
// it; the MCP adapter's Problem Details carry it as their status.
var HTTPStatus = NewTable(http.StatusInternalServerError, map[pipeline.Kind]int{
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
