package adapters_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/spf13/cobra"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/status"

	"github.com/sundial-go/sundial/adapters/cliadapter"
	"github.com/sundial-go/sundial/adapters/httpadapter"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
)

// TestViolationsOneShape: the failing fields of a constraint outcome have
// one shape. HTTP's and the CLI's Problem Details both list them in
// details.errors (and nowhere else), each with field, rule, param (when
// the rule has one) and message; the OpenAPI Problem schema declares that
// shape, and both bodies fit it. gRPC has them once, typed, as a
// google.rpc.BadRequest (field, reason = rule, description = message),
// not again as JSON in the ErrorInfo metadata. A client reading the HTTP
// answer with FromResponse keeps them.
func TestViolationsOneShape(t *testing.T) {
	reg := operations.NewRegistry()
	if err := operations.Register(reg, operations.Descriptor{ID: "billing.pay", Method: "POST", Path: "/pay"},
		func(context.Context, payment) (paid, error) { return paid{OK: true}, nil }); err != nil {
		t.Fatal(err)
	}
	k, err := kernel.New(kernel.WithRegistry(reg))
	if err != nil {
		t.Fatal(err)
	}
	bad := payment{Payee: "", Amount: 20000, Currency: "GBP"}
	// want is each failing field's members but its name, by JSON name.
	want := map[string]map[string]any{
		"amount":   {"rule": "max", "param": "10000", "message": "must be at most 10000."},
		"currency": {"rule": "oneof", "param": "EUR USD", "message": "must be one of: EUR USD."},
		"payee":    {"rule": "required", "message": "is required."},
	}
	check := func(form string, list any, name func(string) string) {
		t.Helper()
		entries, ok := list.([]any)
		if !ok || len(entries) != len(want) {
			t.Fatalf("%s: details.errors = %#v, want %d entries", form, list, len(want))
		}
		for _, e := range entries {
			m, _ := e.(map[string]any)
			var field string
			for f := range want {
				if m["field"] == name(f) {
					field = f
				}
			}
			w := maps.Clone(want[field])
			w["field"] = name(field)
			if field == "" || !reflect.DeepEqual(m, w) {
				t.Errorf("%s: failing field %v, want %v (one of %v)", form, m, w, slices.Sorted(maps.Keys(want)))
			}
		}
	}

	// HTTP: details.errors, fields as JSON pointers; nothing at the top.
	e := echo.New()
	a, err := httpadapter.Mount(e, k)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := a.OpenAPI(httpadapter.OpenAPIInfo{})
	if err != nil {
		t.Fatal(err)
	}
	url := serveHandler(t, e)
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	body, _ := json.Marshal(bad)
	resp, err := client.Post(url+"/pay", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var hp map[string]any
	if err := json.Unmarshal(raw, &hp); err != nil || resp.StatusCode != 400 || hp["code"] != operations.CodeConstraint {
		t.Fatalf("HTTP: %d %s (%v), want 400 %s", resp.StatusCode, raw, err, operations.CodeConstraint)
	}
	if _, top := hp["errors"]; top {
		t.Errorf("HTTP: a top-level errors member beside details.errors: %s", raw)
	}
	hd, _ := hp["details"].(map[string]any)
	check("HTTP", hd["errors"], func(f string) string { return "/" + f })
	var typed httpadapter.Problem
	if err := json.Unmarshal(raw, &typed); err != nil || len(typed.Violations()) != len(want) {
		t.Errorf("HTTP: Problem.Violations() = %+v (%v), want %d", typed.Violations(), err, len(want))
	}
	schema := doc.Components.Schemas["Problem"].Value
	if err := schema.VisitJSON(hp); err != nil {
		t.Errorf("HTTP: the answer does not fit the OpenAPI Problem schema: %v", err)
	}
	items := schema.Properties["details"].Value.Properties["errors"].Value.Items.Value
	if got, w := slices.Sorted(maps.Keys(items.Properties)), jsonMembers(operations.Violation{}); !slices.Equal(got, w) {
		t.Errorf("OpenAPI details.errors items have %q, want operations.Violation's %q", got, w)
	}
	fr := pipeline.AsError(httpadapter.FromResponse(&http.Response{StatusCode: resp.StatusCode,
		Header: resp.Header, Body: io.NopCloser(bytes.NewReader(raw))}))
	if got, _ := fr.Details()[operations.DetailViolations]; got == nil {
		t.Errorf("FromResponse(%s) details = %v, want the failing fields kept", raw, fr.Details())
	}

	// CLI: the same members in details.errors, fields as flags.
	root := &cobra.Command{Use: "app"}
	if err := cliadapter.AddCommands(root, reg, func() (*kernel.Kernel, error) { return k, nil }, cliadapter.WithSignals()); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	root.SetArgs([]string{"billing", "pay", "--amount", "20000", "--currency", "GBP"})
	root.SetOut(&stdout)
	root.SetErr(&stderr)
	if code := cliadapter.Execute(context.Background(), root); code != 2 {
		t.Fatalf("CLI: exit %d, stderr %q; want 2", code, stderr.String())
	}
	line, _, _ := strings.Cut(stderr.String(), "\n")
	var cp map[string]any
	if err := json.Unmarshal([]byte(line), &cp); err != nil || cp["code"] != operations.CodeConstraint {
		t.Fatalf("CLI: stderr %q (%v), want Problem Details %s", stderr.String(), err, operations.CodeConstraint)
	}
	if _, top := cp["errors"]; top {
		t.Errorf("CLI: a top-level errors member: %s", line)
	}
	cd, _ := cp["details"].(map[string]any)
	check("CLI", cd["errors"], func(f string) string { return "--" + f })
	if err := schema.Properties["details"].Value.VisitJSON(cd); err != nil {
		t.Errorf("CLI: details do not fit the OpenAPI Problem schema's: %v", err)
	}

	// gRPC: a BadRequest with the same fields; no JSON copy in ErrorInfo.
	ga, cc := serveGRPC(t, k)
	var res paid
	st := status.Convert(ga.Call(context.Background(), cc, "billing.pay", bad, &res))
	var fvs []any
	for _, d := range st.Details() {
		switch x := d.(type) {
		case *errdetails.ErrorInfo:
			if v, ok := x.GetMetadata()[operations.DetailViolations]; ok {
				t.Errorf("gRPC: ErrorInfo metadata %q = %q, want the fields only in BadRequest", operations.DetailViolations, v)
			}
		case *errdetails.BadRequest:
			for _, fv := range x.GetFieldViolations() {
				m := map[string]any{"field": fv.GetField(), "rule": fv.GetReason(), "message": fv.GetDescription()}
				if p := want[fv.GetField()]["param"]; p != nil {
					m["param"] = p // BadRequest has no member for it: the message states it
				}
				fvs = append(fvs, m)
			}
		}
	}
	check("gRPC", fvs, func(f string) string { return f })
}

// jsonMembers returns the JSON member names of struct v, sorted.
func jsonMembers(v any) []string {
	var out []string
	t := reflect.TypeOf(v)
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}
