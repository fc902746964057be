package systemtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"regexp/syntax"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/sundial-go/sundial/adapters/httpadapter"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/samples/shop/internal/shopcmd"
)

// agreeConfig raises the shop's limits so that every accepted case runs.
const agreeConfig = `{"Sundial":{"Kernel":{"Resilience":{"Operations":{
	"orders.create":{"PermitLimit":1000000,"WindowSeconds":1,"ConcurrencyLimit":100},
	"reports.export":{"PermitLimit":1000000,"WindowSeconds":1,"ConcurrencyLimit":100}}}}}}`

// agreeCase is one generated request body and the schema's expected
// verdict on it.
type agreeCase struct {
	name   string
	body   map[string]any
	valid  bool
	broken int // fields broken (invalid cases): the server lists as many
}

// TestShopOpenAPIConstraintsAgree loads the shop's /openapi.json with
// kin-openapi and, for every request body it describes, generates cases
// from the schema's constraints alone: each bound at and past it
// (minimum/maximum, minLength/maxLength counted in characters, with
// two-byte ones), each enum value and one outside it, a value matching
// the pattern (built from the regexp) and one not, a good and a bad
// format, an omitted optional value's zero, each required field missing,
// and every field broken at once; plus the path parameter's bounds. For
// each, kin-openapi's verdict must be the generated one, and the real
// shop on 127.0.0.1 must agree: a body the schema rejects is a 400
// KERNEL_VALIDATION_007 listing every broken field, one it accepts is not
// a 400 (nor a 500).
func TestShopOpenAPIConstraintsAgree(t *testing.T) {
	openapi3.DefineStringFormatValidator("email", openapi3.NewRegexpFormatValidator(openapi3.FormatOfStringForEmail))
	s := startShopHTTP(t, shopcmd.ServeOptions{KernelOptions: []kernel.Option{kernel.WithConfigJSON([]byte(agreeConfig))}})
	resp, err := s.client.Get(s.url + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	doc, err := openapi3.NewLoader().LoadFromData(raw)
	if err != nil {
		t.Fatal(err)
	}
	if err := doc.Validate(t.Context()); err != nil {
		t.Fatal(err)
	}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	// billing.charge with fail=true answers before its provider delay
	// (processMs up to an hour): accepted cases end at once.
	fixed := map[string]map[string]any{"/billing/charge": {"fail": true}}
	total := 0
	for _, path := range []string{"/orders", "/billing/charge", "/reports/export"} {
		op := doc.Paths.Find(path).Post
		schema := op.RequestBody.Value.Content.Get("application/json").Schema.Value
		cases := bodyCases(t, schema, fixed[path])
		for _, c := range cases {
			body, _ := json.Marshal(c.body)
			agree(t, s, router, http.MethodPost, path, string(body), c)
		}
		total += len(cases)
	}
	// The path parameter of orders.get: its maxLength, at and past it.
	idSchema := doc.Paths.Find("/orders/{id}").Get.Parameters.GetByInAndName("path", "id").Schema.Value
	if idSchema.MaxLength == nil {
		t.Fatal("orders.get: the id path parameter has no maxLength")
	}
	n := int(*idSchema.MaxLength)
	agree(t, s, router, http.MethodGet, "/orders/"+strings.Repeat("x", n), "", agreeCase{name: "id at maxLength", valid: true})
	agree(t, s, router, http.MethodGet, "/orders/"+strings.Repeat("x", n+1), "", agreeCase{name: "id over maxLength", broken: 1})
	total += 2
	t.Logf("%d generated cases agree", total)
	if total < 40 {
		t.Errorf("%d cases generated, want at least 40: the schema lost constraints", total)
	}
}

// agree checks kin-openapi's verdict on one request and the shop's answer.
func agree(t *testing.T, s *shopServer, router routers.Router, method, path, body string, c agreeCase) {
	t.Helper()
	req, err := http.NewRequest(method, s.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	// Accepted reports.export cases end at this deadline (504), not after
	// their delay.
	req.Header.Set(httpadapter.DefaultRelativeDeadlineHeader, "200")
	vreq := req.Clone(context.Background())
	vreq.Body = io.NopCloser(strings.NewReader(body))
	vreq.URL.Scheme, vreq.URL.Host = "", ""
	route, params, err := router.FindRoute(vreq)
	if err != nil {
		t.Fatalf("%s %s: not routed by the document: %v", method, path, err)
	}
	verr := openapi3filter.ValidateRequest(t.Context(), &openapi3filter.RequestValidationInput{Request: vreq, PathParams: params, Route: route})
	if (verr == nil) != c.valid {
		t.Errorf("%s %s (%s) %s: kin-openapi says %v, want valid %v", method, path, c.name, body, verr, c.valid)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var p httpadapter.Problem
	_ = json.Unmarshal(answer, &p)
	switch {
	case resp.StatusCode == http.StatusInternalServerError:
		t.Errorf("%s %s (%s) %s = 500 %s", method, path, c.name, body, answer)
	case c.valid && resp.StatusCode == http.StatusBadRequest:
		t.Errorf("%s %s (%s) %s = 400 %s; the schema accepts it", method, path, c.name, body, answer)
	case !c.valid && (resp.StatusCode != http.StatusBadRequest || p.Code != operations.CodeConstraint):
		t.Errorf("%s %s (%s) %s = %d %s; the schema rejects it, want 400 %s", method, path, c.name, body, resp.StatusCode, answer, operations.CodeConstraint)
	case !c.valid && len(p.Violations()) != c.broken:
		t.Errorf("%s %s (%s) %s: %d failing fields %+v, want %d", method, path, c.name, body, len(p.Violations()), p.Violations(), c.broken)
	}
}

// bodyCases generates the cases of an object schema: a valid base (fixed
// overrides some of its values), then one property at a time at each
// value valueCases derives, each required property missing, and every
// property broken at once.
func bodyCases(t *testing.T, schema *openapi3.Schema, fixed map[string]any) []agreeCase {
	t.Helper()
	base := map[string]any{}
	per := map[string][]valueCase{}
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range schema.Properties {
			if !yield(n) {
				return
			}
		}
	})
	for _, n := range names {
		b, cs := valueCases(t, n, schema.Properties[n].Value)
		base[n] = b
		if v, ok := fixed[n]; ok {
			base[n] = v
			continue
		}
		per[n] = cs
	}
	with := func(name string, v any) map[string]any {
		m := map[string]any{}
		for k, x := range base {
			m[k] = x
		}
		if name != "" {
			m[name] = v
		}
		return m
	}
	out := []agreeCase{{name: "base", body: with("", nil), valid: true}}
	allBad := with("", nil)
	broken := 0
	for _, n := range names {
		first := true
		for _, vc := range per[n] {
			c := agreeCase{name: n + " " + vc.what, body: with(n, vc.v), valid: vc.valid}
			if !vc.valid {
				c.broken = 1
				if first {
					allBad[n], first = vc.v, false
					broken++
				}
			}
			out = append(out, c)
		}
	}
	for _, r := range schema.Required {
		body := with("", nil)
		delete(body, r)
		out = append(out, agreeCase{name: r + " missing", body: body, broken: 1})
	}
	if broken > 1 {
		out = append(out, agreeCase{name: "every field broken", body: allBad, broken: broken})
	}
	return out
}

// valueCase is one value of a property and whether its schema accepts it.
type valueCase struct {
	what  string
	v     any
	valid bool
}

// valueCases returns a valid value of property schema ps and the cases
// its constraints imply.
func valueCases(t *testing.T, name string, ps *openapi3.Schema) (any, []valueCase) {
	t.Helper()
	if len(ps.AnyOf) == 2 && len(ps.AnyOf[0].Value.Enum) == 1 {
		// An omitempty field: its zero value, or the constrained branch.
		inner := *ps.AnyOf[1].Value
		inner.Type = ps.Type
		zero := ps.AnyOf[0].Value.Enum[0]
		b, cs := valueCases(t, name, &inner)
		return zero, append([]valueCase{{"zero (omitted)", zero, true}, {"constrained valid", b, true}}, cs...)
	}
	switch {
	case ps.Type.Is(openapi3.TypeInteger), ps.Type.Is(openapi3.TypeNumber):
		return numberCases(ps)
	case ps.Type.Is(openapi3.TypeString):
		return stringCases(t, name, ps)
	case ps.Type.Is(openapi3.TypeBoolean):
		return false, []valueCase{{"true", true, true}, {"not a boolean", "yes", false}}
	}
	t.Fatalf("property %s: type %v has no case generator", name, ps.Type)
	return nil, nil
}

func numberCases(ps *openapi3.Schema) (any, []valueCase) {
	var cs []valueCase
	lo, hi := math.Inf(-1), math.Inf(1)
	if ps.Min != nil {
		lo = *ps.Min
		cs = append(cs, valueCase{"at minimum", lo, true}, valueCase{"under minimum", lo - 1, false})
	}
	if x := ps.ExclusiveMin.Value; x != nil {
		lo = *x + 1
		cs = append(cs, valueCase{"at exclusiveMinimum", *x, false}, valueCase{"over exclusiveMinimum", lo, true})
	}
	if ps.Max != nil {
		hi = *ps.Max
		cs = append(cs, valueCase{"at maximum", hi, true}, valueCase{"over maximum", hi + 1, false})
	}
	if x := ps.ExclusiveMax.Value; x != nil {
		hi = *x - 1
		cs = append(cs, valueCase{"at exclusiveMaximum", *x, false}, valueCase{"under exclusiveMaximum", hi, true})
	}
	for _, e := range ps.Enum {
		cs = append(cs, valueCase{fmt.Sprint("enum ", e), e, true})
	}
	base := math.Max(lo, math.Min(0, hi))
	if len(ps.Enum) > 0 {
		base = toFloat(ps.Enum[0])
	}
	return base, cs
}

func toFloat(v any) float64 {
	f, _ := v.(float64)
	return f
}

func stringCases(t *testing.T, name string, ps *openapi3.Schema) (any, []valueCase) {
	t.Helper()
	var cs []valueCase
	base := "x"
	if ps.MinLength > 0 {
		base = strings.Repeat("x", int(ps.MinLength))
	}
	for _, e := range ps.Enum {
		cs = append(cs, valueCase{fmt.Sprint("enum ", e), e, true})
	}
	if len(ps.Enum) > 0 {
		base = ps.Enum[0].(string)
		cs = append(cs, valueCase{"outside the enum", "ZZZ", false})
	}
	switch ps.Format {
	case "":
	case "email":
		base = "ada@example.com"
		cs = append(cs, valueCase{"good email", base, true}, valueCase{"bad email", "not-an-email", false})
	default:
		t.Fatalf("property %s: format %q has no case generator", name, ps.Format)
	}
	if ps.Pattern != "" {
		base = matching(t, ps.Pattern)
		cs = append(cs, valueCase{"matching " + ps.Pattern, base, true}, valueCase{"not matching", "!" + base, false})
	}
	if ps.MinLength > 0 {
		n := int(ps.MinLength)
		cs = append(cs, valueCase{"at minLength", strings.Repeat("é", n), true}, valueCase{"under minLength", strings.Repeat("é", n-1), false})
	}
	if ps.MaxLength != nil {
		n := int(*ps.MaxLength)
		at := strings.Repeat("é", n) // 2n bytes, n characters
		if utf8.RuneCountInString(at) != n {
			t.Fatal("é is one character")
		}
		cs = append(cs, valueCase{"at maxLength", at, true}, valueCase{"over maxLength", at + "é", false})
	}
	return base, cs
}

// matching returns a short string the regexp expr matches, built from its
// syntax tree: a literal's runes, a class's first rune, a repeat's
// minimum, an alternation's first branch.
func matching(t *testing.T, expr string) string {
	t.Helper()
	re, err := syntax.Parse(expr, syntax.Perl)
	if err != nil {
		t.Fatalf("pattern %q: %v", expr, err)
	}
	var b bytes.Buffer
	var walk func(re *syntax.Regexp)
	walk = func(re *syntax.Regexp) {
		switch re.Op {
		case syntax.OpLiteral:
			b.WriteString(string(re.Rune))
		case syntax.OpCharClass:
			b.WriteRune(re.Rune[0])
		case syntax.OpAnyChar, syntax.OpAnyCharNotNL:
			b.WriteByte('a')
		case syntax.OpCapture, syntax.OpPlus:
			walk(re.Sub[0])
		case syntax.OpRepeat:
			for range re.Min {
				walk(re.Sub[0])
			}
		case syntax.OpConcat:
			for _, s := range re.Sub {
				walk(s)
			}
		case syntax.OpAlternate:
			walk(re.Sub[0])
		}
	}
	walk(re)
	return b.String()
}
