package httpadapter

import (
	"encoding/json"
	"net/http"
	"net/url"
	"reflect"
	"testing"

	"github.com/sundial-go/sundial/pipeline"
)

type fuzzInput struct {
	ID     int64             `param:"id" json:"id"`
	Name   string            `json:"name"`
	Amount int               `json:"amount"`
	Ratio  float32           `json:"ratio"`
	Flag   *bool             `json:"flag"`
	Tags   []string          `json:"tags" query:"tag"`
	Limit  uint8             `query:"limit" json:"-"`
	Meta   map[string]string `json:"meta"`
	Nested struct {
		Qty []int `json:"qty"`
	} `json:"nested"`
}

// FuzzBind feeds arbitrary bodies, path parameters and query strings to
// the binder: it never panics, and every failure is a VALIDATION outcome
// that names a field or a byte offset.
func FuzzBind(f *testing.F) {
	seeds := []struct{ body, param, query string }{
		{`{"name":"a","amount":1}`, "7", "limit=3&tag=x&tag=y"},
		{`{"name": "a", "amount": 12a}`, "7", ""},
		{`{"nested":{"qty":[1,"2"]}}`, "-9223372036854775808", "limit=256"},
		{`[`, "x", "%zz"},
		{`{"flag":true,"meta":{"k":"v"},"ratio":1e39}`, "9223372036854775808", "tag="},
		{"\xff\xfe", "%2F", "limit=-1"},
		{`{"name":"\ud800"}`, "", ";;;"},
	}
	for _, s := range seeds {
		f.Add([]byte(s.body), s.param, s.query)
	}
	b, err := newBinder(reflect.TypeFor[fuzzInput](), http.MethodPost, []string{"id"})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body []byte, param, query string) {
		r := &http.Request{Method: http.MethodPost, URL: &url.URL{Path: "/x/" + param, RawQuery: query}}
		var in fuzzInput
		perr := b.bind(r, []string{"id"}, []string{param}, body, &in)
		if perr == nil {
			if _, err := json.Marshal(in); err != nil {
				t.Fatalf("bound input does not encode: %v", err)
			}
			return
		}
		if perr.Kind() != pipeline.KindValidation {
			t.Fatalf("bind() = %v (kind %v), want VALIDATION", perr, perr.Kind())
		}
		_, hasField := perr.Details()["field"]
		_, hasOffset := perr.Details()["offset"]
		if perr.Code() != codeMalformedBody && !hasField {
			t.Fatalf("bind() = %v with details %v, want a field", perr, perr.Details())
		}
		if perr.Code() == codeMalformedBody && !hasOffset && !hasField && perr.Message() != "The request body could not be decoded." {
			t.Fatalf("bind() = %v with details %v, want an offset", perr, perr.Details())
		}
		if _, err := json.Marshal(perr.Details()); err != nil {
			t.Fatalf("details do not encode: %v", err)
		}
	})
}
