package operations

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

type walkLine struct {
	SKU string `json:"sku"`
}

type walkInput struct {
	Name   string              `json:"name"`
	Amount int                 `json:"amount"`
	Lines  []walkLine          `json:"lines"`
	ByName map[string]walkLine `json:"byName"`
	Next   *walkInput          `json:"next"`
	Any    any                 `json:"any"`
	Grid   [2][]walkLine       `json:"grid"`
	Émoji  string              `json:"émoji"`
}

// walkSeeds are documents FuzzCheckJSONAgrees starts from.
var walkSeeds = []string{
	`{"name":"widget","amount":3}`,
	`{"amount":1,"extra":true}`,
	`{"Amount":1}`,
	`{"lines":[{"sku":"a"},{"SKU":"b"}]}`,
	`{"byName":{"x":{"qty":1}}}`,
	`{"next":{"next":{"nope":1}}}`,
	`{"gr\u0069d":[[{"sku":"a"}],[{"s\u006bu":"b","x":[1,{"y":2}]}]]}`,
	`{"any":{"whatever":[1,2,{"k":null}]},"name":"a\"b\\","amount":-1.5e3}`,
	`{"émoji":"x","émojï":"y"}`,
	` {"name" : "x" , "lines" : [ ] , "next" : null } trailing`,
	`{"amount":`,
	`{"amount":1,"extra":}`,
	`{"extra":1,}`,
	`{"extra":tru}`,
	`[{"a":1}]`,
	`{"":1}`,
	`{"next":{"":{"a":1}}}`,
	`"just a string"`,
	``,
	`{"name":"\ud800"}`,
	`{"lines":[{"sku":"a"}],"lines2":[[[[]]]]}`,
}

// FuzzCheckJSONAgrees: CheckJSON, which walks the document's bytes,
// answers as the generic tree it replaced did (checkJSONTree) on every
// document without a repeated key (where the walk checks every
// occurrence and the tree the last), under each policy.
func FuzzCheckJSONAgrees(f *testing.F) {
	for _, s := range walkSeeds {
		f.Add([]byte(s))
	}
	typ := reflect.TypeFor[walkInput]()
	policies := []InputPolicy{{}, {FoldKeyCase: true}, {AllowUnknownFields: true}}
	f.Fuzz(func(t *testing.T, doc []byte) {
		if repeatsKey(doc) {
			t.Skip("a repeated key")
		}
		for _, p := range policies {
			got := CheckJSON(typ, p, doc)
			want := checkJSONTree(typ, p, doc)
			if (got == nil) != (want == nil) {
				t.Fatalf("policy %+v, %q: CheckJSON = %v, the tree says %v", p, doc, got, want)
			}
			if got == nil {
				continue
			}
			// The tree reports one of several unknown keys at random (a
			// map's order); the walk, the first in the document.
			seen := map[string]bool{}
			for range 16 {
				seen[checkJSONTree(typ, p, doc).Error()] = true
			}
			if !seen[got.Error()] {
				t.Fatalf("policy %+v, %q: CheckJSON = %v, the tree says one of %v", p, doc, got, seen)
			}
		}
	})
}

// repeatsKey reports whether an object of the valid JSON document doc
// repeats a key (false for an invalid one).
func repeatsKey(doc []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(doc))
	type level struct {
		keys   map[string]bool
		object bool
		isKey  bool // the next token of the object is a key
	}
	var stack []*level
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		var top *level
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.object && top.isKey {
			if k, ok := tok.(string); ok {
				if top.keys[k] {
					return true
				}
				top.keys[k] = true
				top.isKey = false
				continue
			}
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &level{keys: map[string]bool{}, object: true, isKey: true})
			continue
		case json.Delim('['):
			stack = append(stack, &level{})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
		if len(stack) == 0 {
			return false
		}
		if top := stack[len(stack)-1]; top.object {
			top.isKey = true
		}
	}
}

// TestCheckJSONAllocatesNothing: a valid input whose keys hold no escape
// costs no allocation, also nested; the generic tree cost dozens.
func TestCheckJSONAllocatesNothing(t *testing.T) {
	typ := reflect.TypeFor[walkInput]()
	for _, doc := range []string{
		`{"name":"widget","amount":3}`,
		`{"lines":[{"sku":"a"},{"sku":"b"}],"byName":{"x":{"sku":"c"}},"next":{"next":{"amount":1}},"any":{"k":[1,2]}}`,
	} {
		data := []byte(doc)
		CheckJSON(typ, InputPolicy{}, data) // fills the field cache
		if n := testing.AllocsPerRun(100, func() { CheckJSON(typ, InputPolicy{}, data) }); n != 0 {
			t.Errorf("CheckJSON(%s): %v allocations, want 0", doc, n)
		}
	}
	deep := strings.Repeat(`{"next":`, 40) + `{"amount":1}` + strings.Repeat(`}`, 40)
	if err := CheckJSON(typ, InputPolicy{}, []byte(deep)); err != nil {
		t.Errorf("CheckJSON(40 levels) = %v, want nil", err)
	}
	tooDeep := strings.Repeat(`[`, 10001) + strings.Repeat(`]`, 10001)
	if err := CheckJSON(reflect.TypeFor[[]any](), InputPolicy{}, []byte(tooDeep)); err != nil {
		t.Errorf("CheckJSON(10001 levels) = %v, want nil", err)
	}
}

// TestCheckJSONRepeatedKeysAndOrder: every occurrence of a repeated key is
// checked (an unknown field inside an earlier occurrence is reported,
// though encoding/json would keep only the last), and of several unknown
// keys the first in the document's order is reported.
func TestCheckJSONRepeatedKeysAndOrder(t *testing.T) {
	typ := reflect.TypeFor[walkInput]()
	for _, tc := range []struct{ doc, field string }{
		{`{"next":{"zz":1},"next":null}`, "next.zz"},
		{`{"byName":{"a":{"zz":1},"a":{}}}`, "byName.a.zz"},
		{`{"b":1,"a":2,"c":3}`, "b"},
		{`{"lines":[{"sku":"x"},{"q":1,"p":2}],"z":1}`, "lines[1].q"},
	} {
		err := CheckJSON(typ, InputPolicy{}, []byte(tc.doc))
		if err == nil || err.Details()["field"] != tc.field {
			t.Errorf("CheckJSON(%s) = %v, want the unknown field %q", tc.doc, err, tc.field)
		}
	}
}
