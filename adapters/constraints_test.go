package adapters_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/labstack/echo/v4"
	"github.com/spf13/cobra"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundial-go/sundial/adapters/cliadapter"
	"github.com/sundial-go/sundial/adapters/grpcadapter/prototest"
	"github.com/sundial-go/sundial/adapters/httpadapter"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
)

// payment is an input with constraints on three fields.
type payment struct {
	Payee    string `json:"payee" validate:"required,max=20"`
	Amount   int    `json:"amount" validate:"min=1,max=10000"`
	Currency string `json:"currency" validate:"oneof=EUR USD"`
}

type paid struct {
	OK bool `json:"ok"`
}

// TestConstraintsConformance: the same input with three fields wrong
// (payee missing, amount over its maximum, currency not one of EUR USD)
// gives KERNEL_VALIDATION_007 naming the same three fields on HTTP (the
// Problem's details.errors, JSON pointers), gRPC (a google.rpc.BadRequest
// with one FieldViolation each) and the CLI (one line per flag, exit 2);
// the handler never runs.
func TestConstraintsConformance(t *testing.T) {
	var ran atomic.Int32
	reg := operations.NewRegistry()
	if err := operations.Register(reg, operations.Descriptor{ID: "billing.pay", Method: "POST", Path: "/pay"},
		func(context.Context, payment) (paid, error) { ran.Add(1); return paid{OK: true}, nil }); err != nil {
		t.Fatal(err)
	}
	bad := payment{Payee: "", Amount: 20000, Currency: "GBP"}
	want := []string{"amount max", "currency oneof", "payee required"}
	got := failuresEverywhere(t, reg, "billing.pay", "/pay", bad, []string{"billing", "pay", "--amount", "20000", "--currency", "GBP"})
	for proto, fields := range got {
		checkFields(t, proto, fields, want)
	}
	if n := ran.Load(); n != 0 {
		t.Errorf("handler ran %d times; want never", n)
	}
}

// failuresEverywhere sends bad to operation id over HTTP (POST path), gRPC
// and the CLI (cliArgs) on real listeners, checks each answer is
// KERNEL_VALIDATION_007, and returns each protocol's failing fields as
// "field rule" (JSON names; the CLI's flags without "--").
func failuresEverywhere(t *testing.T, reg *operations.Registry, id, path string, bad any, cliArgs []string) map[string][]string {
	t.Helper()
	k, err := kernel.New(kernel.WithRegistry(reg))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	// HTTP: the Problem's details.errors, fields as JSON pointers.
	url := serveHTTP(t, k)
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	body, _ := json.Marshal(bad)
	resp, err := client.Post(url+path, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var p httpadapter.Problem
	err = json.NewDecoder(resp.Body).Decode(&p)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 400 || p.Code != operations.CodeConstraint {
		t.Fatalf("HTTP: status %d code %q (%v), want 400 %s", resp.StatusCode, p.Code, err, operations.CodeConstraint)
	}
	for _, fe := range p.Violations() {
		out["HTTP"] = append(out["HTTP"], strings.TrimPrefix(fe.Field, "/")+" "+fe.Rule)
		if !strings.HasPrefix(fe.Field, "/") || fe.Rule == "" || fe.Message == "" {
			t.Errorf("HTTP field error %+v: want a JSON pointer, a rule and a message", fe)
		}
	}
	// gRPC: a google.rpc.BadRequest, one FieldViolation per field.
	ga, cc := serveGRPC(t, k)
	var res paid
	err = ga.Call(context.Background(), cc, id, bad, &res)
	st := status.Convert(err)
	if reason := pipeline.AsError(err).Details()["reason"]; st.Code() != codes.InvalidArgument || reason != operations.CodeConstraint {
		t.Fatalf("gRPC = %v (reason %v), want InvalidArgument %s", err, reason, operations.CodeConstraint)
	}
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			for _, fv := range br.GetFieldViolations() {
				out["gRPC"] = append(out["gRPC"], fv.GetField()+" "+fv.GetReason())
			}
		}
	}
	// CLI: one line per failing flag, exit 2.
	root := &cobra.Command{Use: "app"}
	if err := cliadapter.AddCommands(root, reg, func() (*kernel.Kernel, error) { return k, nil }, cliadapter.WithSignals()); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	root.SetArgs(append(slices.Clone(cliArgs), "--output", "text"))
	root.SetOut(&stdout)
	root.SetErr(&stderr)
	if code := cliadapter.Execute(context.Background(), root); code != 2 || !strings.Contains(stderr.String(), operations.CodeConstraint) {
		t.Fatalf("CLI: exit %d, stderr %q; want 2 and %s", code, stderr.String(), operations.CodeConstraint)
	}
	for l := range strings.Lines(stderr.String()) {
		if f, ok := strings.CutPrefix(l, "  --"); ok {
			name, rest, _ := strings.Cut(f, ":")
			_, rule, _ := strings.Cut(strings.TrimSpace(rest), " (")
			out["CLI"] = append(out["CLI"], name+" "+strings.TrimSuffix(rule, ")"))
		}
	}
	return out
}

func checkFields(t *testing.T, proto string, got, want []string) {
	t.Helper()
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("%s: failing fields %q, want %q", proto, got, want)
	}
}

// shipment exercises every rule the adapters publish, nested structs and
// slices through dive, and a custom rule (even).
type shipment struct {
	Code     string   `json:"code" validate:"required,len=8"`
	Weight   float64  `json:"weight" validate:"gt=0,lt=1000"`
	Site     string   `json:"site,omitempty" validate:"omitempty,uri"`
	Trace    string   `json:"trace" validate:"uuid"`
	Mode     string   `json:"mode" validate:"oneof=air sea 'slow boat'"`
	Priority int      `json:"priority" validate:"oneof=1 2 3"`
	Parcels  []parcel `json:"parcels" validate:"min=1,max=3,dive"`
	Tags     []string `json:"tags,omitempty" validate:"max=5,dive,min=2,max=10"`
	Crates   int      `json:"crates" validate:"even"`
}

type parcel struct {
	SKU string `json:"sku" validate:"required,pattern=^[A-Z]{3}-[0-9]+$"`
	Qty int    `json:"qty" validate:"min=1,max=99"`
}

// shipRegistry registers ship.create (input shipment) with the custom
// rule even.
func shipRegistry(t *testing.T) *operations.Registry {
	t.Helper()
	reg := operations.NewRegistry()
	if err := reg.AddRule("even", "an even number", func(v reflect.Value, _ string) bool { return v.Int()%2 == 0 }); err != nil {
		t.Fatal(err)
	}
	if err := operations.Register(reg, operations.Descriptor{ID: "ship.create", Method: "POST", Path: "/ship"},
		func(context.Context, shipment) (paid, error) { return paid{OK: true}, nil }); err != nil {
		t.Fatal(err)
	}
	return reg
}

// TestCustomRuleEverywhere: a rule added once with Registry.AddRule is
// enforced on HTTP, gRPC and the CLI, as a built-in one is, with its
// description as the message; a registry without it refuses the tag.
func TestCustomRuleEverywhere(t *testing.T) {
	reg := shipRegistry(t)
	bad := shipment{Code: "ABCDEFGH", Weight: 1, Trace: "6f1c7e0a-8a3b-4b0e-9a51-1f2d3c4b5a69", Mode: "air", Priority: 1,
		Parcels: []parcel{{SKU: "ABC-1", Qty: 1}}, Crates: 3}
	got := failuresEverywhere(t, reg, "ship.create", "/ship", bad, []string{"ship", "create", "--input", mustJSON(t, bad)})
	for proto, fields := range got {
		checkFields(t, proto, fields, []string{"crates even"})
	}
	d, _ := reg.Lookup("ship.create")
	vs := d.CheckConstraints(&bad).Details()[operations.DetailViolations].([]operations.Violation)
	if vs[0].Message != "must satisfy even: an even number." {
		t.Errorf("message %q, want the rule's description", vs[0].Message)
	}
	other := operations.NewRegistry()
	if err := operations.Register(other, operations.Descriptor{ID: "ship.create"},
		func(context.Context, shipment) (paid, error) { return paid{}, nil }); err == nil || !strings.Contains(err.Error(), "even") {
		t.Errorf("another registry: Register = %v, want the unknown rule even refused", err)
	}
	for _, name := range []string{"min", "even", "Even", "", "pattern"} {
		if err := reg.AddRule(name, "x", func(reflect.Value, string) bool { return true }); err == nil {
			t.Errorf("AddRule(%q) = nil, want an error (built-in, taken or malformed)", name)
		}
	}
	if err := reg.AddRule("odd", "", nil); err == nil {
		t.Error("AddRule without check and description = nil, want an error")
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestConstraintsPublished: the constraints of ship.create are in its
// OpenAPI request schema as JSON Schema keywords (the custom rule as
// x-sundial-rules), in the gRPC schema reflection exports as field
// comments (which protoc compiles and buf lints), and in the CLI's flag
// help, whose oneof values cobra completes.
func TestConstraintsPublished(t *testing.T) {
	reg := shipRegistry(t)
	k, err := kernel.New(kernel.WithRegistry(reg))
	if err != nil {
		t.Fatal(err)
	}

	t.Run("OpenAPI", func(t *testing.T) {
		e := echo.New()
		a, err := httpadapter.Mount(e, k)
		if err != nil {
			t.Fatal(err)
		}
		h, err := a.OpenAPIHandler(httpadapter.OpenAPIInfo{})
		if err != nil {
			t.Fatal(err)
		}
		e.GET("/openapi.json", h)
		resp, err := http.Get(serveHandler(t, e) + "/openapi.json")
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		http.DefaultClient.CloseIdleConnections()
		doc, err := openapi3.NewLoader().LoadFromData(raw)
		if err != nil {
			t.Fatal(err)
		}
		if err := doc.Validate(t.Context()); err != nil {
			t.Fatal(err)
		}
		s := doc.Paths.Find("/ship").Post.RequestBody.Value.Content.Get("application/json").Schema.Value
		got := map[string]any{}
		for name, ref := range s.Properties {
			b, _ := json.Marshal(ref.Value)
			var m map[string]any
			_ = json.Unmarshal(b, &m)
			delete(m, "type")
			delete(m, "format") // but for the formats below
			if f := ref.Value.Format; f == "uuid" || f == "uri" {
				m["format"] = f
			}
			got[name] = m
		}
		want := map[string]string{
			"code":     `{"minLength":8,"maxLength":8}`,
			"weight":   `{"exclusiveMinimum":0,"exclusiveMaximum":1000}`,
			"site":     `{"anyOf":[{"enum":[""]},{"format":"uri"}]}`,
			"trace":    `{"format":"uuid"}`,
			"mode":     `{"enum":["air","sea","slow boat"]}`,
			"priority": `{"enum":[1,2,3]}`,
			"parcels": `{"minItems":1,"maxItems":3,"items":{"additionalProperties":false,"required":["sku","qty"],"properties":{
				"sku":{"type":"string","minLength":1,"pattern":"^[A-Z]{3}-[0-9]+$"},"qty":{"type":"integer","minimum":1,"maximum":99}},"type":"object"}}`,
			"tags":   `{"maxItems":5,"items":{"type":"string","minLength":2,"maxLength":10}}`,
			"crates": `{"x-sundial-rules":[{"rule":"even","description":"an even number"}]}`,
		}
		for name, w := range want {
			var wm any
			if err := json.Unmarshal([]byte(w), &wm); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if !reflect.DeepEqual(got[name], wm) {
				g, _ := json.Marshal(got[name])
				t.Errorf("property %s = %s, want %s", name, g, w)
			}
		}
		wantReq := []string{"code", "mode", "parcels", "priority", "trace", "weight"}
		req := slices.Sorted(slices.Values(s.Required))
		if !slices.Equal(req, wantReq) {
			t.Errorf("required = %q, want %q (the fields whose zero value fails)", req, wantReq)
		}
	})

	t.Run("gRPC", func(t *testing.T) {
		_, cc := serveGRPC(t, k)
		comments := map[string]string{}
		for _, fd := range prototest.Export(t, cc) {
			msgs := fd.Messages()
			for i := range msgs.Len() {
				fields := msgs.Get(i).Fields()
				for j := range fields.Len() {
					f := fields.Get(j)
					if c := fd.SourceLocations().ByDescriptor(f).LeadingComments; c != "" {
						comments[string(msgs.Get(i).Name())+"."+string(f.Name())] = strings.TrimSpace(c)
					}
				}
			}
		}
		want := map[string]string{
			"CreateRequest.code":     "Constraints: required; exactly 8 characters.",
			"CreateRequest.mode":     "Constraints: must be given; one of air sea 'slow boat'.",
			"CreateRequest.parcels":  "Constraints: must be given; at least 1 element; at most 3 elements.",
			"CreateRequest.tags":     "Constraints: at most 5 elements; each element: at least 2 characters; each element: at most 10 characters.",
			"CreateRequest.crates":   "Constraints: even: an even number.",
			"CreateRequest.weight":   "Constraints: must be given; more than 0; less than 1000.",
			"Parcel.sku":             "Constraints: required; matches ^[A-Z]{3}-[0-9]+$.",
			"Parcel.qty":             "Constraints: must be given; at least 1; at most 99.",
			"CreateRequest.site":     "Constraints: a valid uri.",
			"CreateRequest.trace":    "Constraints: must be given; a valid uuid.",
			"CreateRequest.priority": "Constraints: must be given; one of 1 2 3.",
		}
		for f, w := range want {
			if comments[f] != w {
				t.Errorf("comment of %s = %q, want %q", f, comments[f], w)
			}
		}
		prototest.Check(t, cc) // protoc compiles it, buf lints it, comments and all
	})

	t.Run("CLI", func(t *testing.T) {
		run := func(args ...string) string { // a fresh command tree: cobra keeps flag state
			root := &cobra.Command{Use: "app"}
			if err := cliadapter.AddCommands(root, reg, func() (*kernel.Kernel, error) { return k, nil }); err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			root.SetArgs(args)
			root.SetOut(&out)
			root.SetErr(&out)
			_ = root.Execute()
			return out.String()
		}
		help := run("ship", "create", "--help")
		for _, w := range []string{
			`input field "code" (required; exactly 8 characters)`,
			`input field "mode" (one of air sea 'slow boat')`,
			`input field "crates" (even: an even number)`,
			`input field "tags" (at most 5 elements; each element: at least 2 characters; each element: at most 10 characters)`,
		} {
			if !strings.Contains(help, w) {
				t.Errorf("help does not show %q:\n%s", w, help)
			}
		}
		comp := run(cobra.ShellCompRequestCmd, "ship", "create", "--mode", "")
		for _, w := range []string{"air\n", "sea\n", "slow boat\n"} {
			if !strings.Contains(comp, w) {
				t.Errorf("completion of --mode %q lacks %q", comp, w)
			}
		}
		if comp := run(cobra.ShellCompRequestCmd, "ship", "create", "--priority", "2"); !strings.HasPrefix(comp, "2\n") {
			t.Errorf("completion of --priority 2 = %q, want 2", comp)
		}
	})
}
