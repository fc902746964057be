package operations_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
)

type policyLine struct {
	SKU string `json:"sku"`
}

type policyBase struct {
	Tenant string `json:"tenant"`
}

type policyInput struct {
	policyBase
	Amount  int                   `json:"amount"`
	Lines   []policyLine          `json:"lines"`
	ByName  map[string]policyLine `json:"byName"`
	Next    *policyInput          `json:"next"`
	Skipped string                `json:"-"`
	NoTag   string
	hidden  string
}

// TestCheckJSON is the input policy every adapter applies (docs/pipeline.md,
// "One input policy"): unknown fields and keys in the wrong case are
// KERNEL_VALIDATION_003 naming the field by its path, unless the policy
// allows them.
func TestCheckJSON(t *testing.T) {
	t.Parallel()
	strict := operations.InputPolicy{}
	tests := []struct {
		name   string
		policy operations.InputPolicy
		doc    string
		field  string // "" for accepted
		msg    string
	}{
		{"known fields", strict, `{"amount":1,"tenant":"t","lines":[{"sku":"a"}],"byName":{"x":{"sku":"b"}},"NoTag":"n","next":{"amount":2}}`, "", ""},
		{"unknown", strict, `{"amount":1,"extra":true}`, "extra", "Unknown field 'extra'."},
		{"key case", strict, `{"Amount":1}`, "Amount", "Unknown field 'Amount'; field names are case-sensitive (did you mean 'amount'?)."},
		{"in a list", strict, `{"lines":[{"sku":"a"},{"SKU":"b"}]}`, "lines[1].SKU", "did you mean 'lines[1].sku'?"},
		{"in a map value", strict, `{"byName":{"x":{"qty":1}}}`, "byName.x.qty", ""},
		{"in a pointer", strict, `{"next":{"next":{"nope":1}}}`, "next.next.nope", ""},
		{"json:\"-\" is unknown", strict, `{"Skipped":"x"}`, "Skipped", ""},
		{"unexported is unknown", strict, `{"hidden":"x"}`, "hidden", ""},
		{"unknown allowed", operations.InputPolicy{AllowUnknownFields: true}, `{"amount":1,"extra":true,"lines":[{"x":1}]}`, "", ""},
		{"unknown allowed, case strict", operations.InputPolicy{AllowUnknownFields: true}, `{"Amount":1}`, "", ""},
		{"case folded", operations.InputPolicy{FoldKeyCase: true}, `{"AMOUNT":1,"Lines":[{"Sku":"a"}]}`, "", ""},
		{"case folded, unknown strict", operations.InputPolicy{FoldKeyCase: true}, `{"AMOUNT":1,"extra":1}`, "extra", ""},
		{"malformed is the decoder's", strict, `{"amount":`, "", ""},
		{"empty", strict, ``, "", ""},
		{"not an object", strict, `[1,2]`, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := operations.CheckJSON(reflect.TypeFor[policyInput](), tt.policy, []byte(tt.doc))
			if tt.field == "" {
				if err != nil {
					t.Fatalf("CheckJSON(%s) = %v, want nil", tt.doc, err)
				}
				return
			}
			if err == nil || err.Kind() != pipeline.KindValidation || err.Code() != operations.CodeUnknownField || err.Details()["field"] != tt.field {
				t.Fatalf("CheckJSON(%s) = %v, want VALIDATION %s with field %q", tt.doc, err, operations.CodeUnknownField, tt.field)
			}
			if tt.msg != "" && !strings.Contains(err.Message(), tt.msg) {
				t.Errorf("message = %q, want it to contain %q", err.Message(), tt.msg)
			}
		})
	}
}

func TestDescriptorCheckJSONUsesItsPolicy(t *testing.T) {
	t.Parallel()
	d := &operations.Descriptor{Input: reflect.TypeFor[policyInput](), InputPolicy: operations.InputPolicy{AllowUnknownFields: true}}
	if err := d.CheckJSON([]byte(`{"extra":1}`)); err != nil {
		t.Errorf("lenient descriptor: %v", err)
	}
	d.InputPolicy = operations.InputPolicy{}
	if err := d.CheckJSON([]byte(`{"extra":1}`)); err == nil {
		t.Error("strict descriptor accepted an unknown field")
	}
}
