package operations

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/sundial-go/sundial/pipeline"
)

type line struct {
	SKU string `json:"sku" validate:"required,pattern=^[A-Z]{3}-[0-9]+$"`
	Qty int    `json:"qty" validate:"min=1,max=99"`
}

type order struct {
	Email string  `json:"email" validate:"required,email"`
	Site  string  `json:"site,omitempty" validate:"omitempty,uri"`
	ID    string  `json:"id" validate:"uuid"`
	Code  string  `json:"code" validate:"len=3"`
	Lines []line  `json:"lines" validate:"required,min=1,max=5,dive"`
	Ship  *line   `json:"ship,omitempty" validate:"omitempty"`
	Plain float64 `json:"plain"`
}

// TestCheckConstraints: every failing field is reported at once, named
// by its JSON path (nested structs through dive), with its rule.
func TestCheckConstraints(t *testing.T) {
	ok := &order{Email: "a@b.c", ID: "6f1c7e0a-8a3b-4b0e-9a51-1f2d3c4b5a69", Code: "EUR", Lines: []line{{SKU: "ABC-1", Qty: 2}}}
	if err := builtin.CheckConstraints(ok); err != nil {
		t.Fatalf("valid order: %v", err)
	}
	bad := &order{Email: "nope", Site: "::", ID: "x", Code: "EU", Lines: []line{{SKU: "ABC-1", Qty: 1}, {SKU: "abc", Qty: 100}}}
	err := builtin.CheckConstraints(bad)
	if err == nil || err.Code() != CodeConstraint || err.Kind() != pipeline.KindValidation {
		t.Fatalf("invalid order = %v, want VALIDATION %s", err, CodeConstraint)
	}
	vs, _ := err.Details()[DetailViolations].([]Violation)
	got := map[string]string{}
	for _, v := range vs {
		got[v.Field] = v.Rule
		if v.Message == "" {
			t.Errorf("%s: no message", v.Field)
		}
	}
	want := map[string]string{"email": "email", "site": "uri", "id": "uuid", "code": "len", "lines[1].sku": "pattern", "lines[1].qty": "max"}
	if len(got) != len(want) {
		t.Errorf("violations %v, want %v", got, want)
	}
	for f, r := range want {
		if got[f] != r {
			t.Errorf("field %s: rule %q, want %q (all: %v)", f, got[f], r, got)
		}
	}
	if err := builtin.CheckConstraints(&order{Email: "a@b.c", ID: ok.ID, Code: "EUR"}); err == nil {
		t.Error("no lines: want required")
	}
	if builtin.CheckConstraints(&struct{ A int }{}) != nil || builtin.CheckConstraints(nil) != nil || builtin.CheckConstraints((*order)(nil)) != nil {
		t.Error("no constraints, nil or typed nil input: want nil")
	}
}

// TestRegisterRefusesBadConstraints: a pattern that does not compile or
// an unknown rule is refused at registration, naming the operation.
func TestRegisterRefusesBadConstraints(t *testing.T) {
	type badPattern struct {
		A string `validate:"pattern=[a-"`
	}
	type unknownRule struct {
		A string `validate:"nosuchrule"`
	}
	r := NewRegistry()
	if err := Register(r, Descriptor{ID: "x.pattern"}, func(context.Context, badPattern) (struct{}, error) { return struct{}{}, nil }); err == nil || !strings.Contains(err.Error(), "x.pattern") {
		t.Errorf("bad pattern: err = %v, want one naming x.pattern", err)
	}
	if err := Register(r, Descriptor{ID: "x.rule"}, func(context.Context, unknownRule) (struct{}, error) { return struct{}{}, nil }); err == nil || !strings.Contains(err.Error(), "nosuchrule") {
		t.Errorf("unknown rule: err = %v, want one naming the rule", err)
	}
}

// builtin is a descriptor Register did not make: it checks the built-in
// rules only.
var builtin *Descriptor

// TestCustomRulePanicFails: a custom rule whose check panics fails the
// value instead of crashing the caller.
func TestCustomRulePanicFails(t *testing.T) {
	r := NewRegistry()
	if err := r.AddRule("boom", "never panics", func(reflect.Value, string) bool { panic("boom") }); err != nil {
		t.Fatal(err)
	}
	type in struct {
		A string `json:"a" validate:"boom"`
	}
	if err := Register(r, Descriptor{ID: "x.boom"}, func(context.Context, in) (struct{}, error) { return struct{}{}, nil }); err != nil {
		t.Fatal(err)
	}
	d, _ := r.Lookup("x.boom")
	err := d.CheckConstraints(&in{A: "x"})
	if err == nil || err.Code() != CodeConstraint {
		t.Fatalf("CheckConstraints = %v, want %s", err, CodeConstraint)
	}
}

// TestViolationsBounded: an input failing in 300 slice elements gets an
// answer listing maxViolations of them, and saying how many failed.
func TestViolationsBounded(t *testing.T) {
	type tagged struct {
		Tags []string `json:"tags" validate:"dive,min=1"`
	}
	reg := NewRegistry()
	if err := Register(reg, Descriptor{ID: "tags.set"}, func(context.Context, tagged) (struct{}, error) { return struct{}{}, nil }); err != nil {
		t.Fatal(err)
	}
	d, _ := reg.Lookup("tags.set")
	err := d.CheckConstraints(tagged{Tags: make([]string, 300)})
	e := pipeline.AsError(err)
	vs, _ := e.Details()[DetailViolations].([]Violation)
	if e.Code() != CodeConstraint || len(vs) != maxViolations || !strings.Contains(e.Message(), "300 fields are invalid") || !strings.HasSuffix(e.Message(), "and 200 more.") {
		t.Fatalf("CheckConstraints(300 empty tags) = %d violations, %q; want %d listed, 300 counted, 200 more", len(vs), e.Message(), maxViolations)
	}
}
