package operations_test

import (
	"context"
	"strings"
	"testing"

	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
)

func TestValidateID(t *testing.T) {
	good := []string{"orders.create", "reports.export", "billing.refund-partial", "inventory.v2.reserve", "a.b", "a1.b2"}
	for _, id := range good {
		if err := operations.ValidateID(id); err != nil {
			t.Errorf("ValidateID(%q) = %v, want nil", id, err)
		}
	}
	bad := []string{"", "orders", "Orders.create", "orders..create", ".orders", "orders.", "orders.create-", "orders.cre--ate",
		"1orders.create", "orders.create_x", "orders.créate", "orders create", "orders.-x", strings.Repeat("a", 100) + "." + strings.Repeat("b", 40)}
	for _, id := range bad {
		err := operations.ValidateID(id)
		if err == nil {
			t.Errorf("ValidateID(%q) = nil, want an error", id)
			continue
		}
		if id != "" && len(id) <= operations.MaxIDLength && !strings.Contains(err.Error(), id) {
			t.Errorf("ValidateID(%q) = %q, want the ID in the message", id, err)
		}
	}
}

func FuzzValidateID(f *testing.F) {
	for _, s := range []string{"orders.create", "a.b-c.d", "..", "A.b", "x.y-", "ñ.a"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		err := operations.ValidateID(id)
		if err != nil {
			return
		}
		// Accepted IDs are lowercase ASCII, have a group and a name, and
		// round-trip through Group/Name.
		if operations.Group(id)+"."+operations.Name(id) != id || operations.Name(id) == "" {
			t.Fatalf("accepted %q but Group/Name do not split it", id)
		}
		for i := 0; i < len(id); i++ {
			c := id[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '-') {
				t.Fatalf("accepted %q with byte %q", id, c)
			}
		}
	})
}

func TestPascalCase(t *testing.T) {
	for in, want := range map[string]string{"orders": "Orders", "create": "Create", "export-csv": "ExportCsv", "v2.reserve": "V2Reserve"} {
		if got := operations.PascalCase(in); got != want {
			t.Errorf("PascalCase(%q) = %q, want %q", in, got, want)
		}
	}
}

type in struct{ N int }
type out struct{ N int }

func double(_ context.Context, i in) (out, error) { return out{i.N * 2}, nil }

func TestRegister(t *testing.T) {
	reg := operations.NewRegistry()
	if err := operations.Register(reg, operations.Descriptor{ID: "math.double", Method: "post", Path: "/double"}, double); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		d    operations.Descriptor
		fn   func(context.Context, in) (out, error)
		want string
	}{
		{"duplicate", operations.Descriptor{ID: "math.double"}, double, `"math.double" is already registered`},
		{"malformed", operations.Descriptor{ID: "Math.Double"}, double, `"Math.Double"`},
		{"nil func", operations.Descriptor{ID: "math.nil"}, nil, `"math.nil": nil handler`},
		{"half http", operations.Descriptor{ID: "math.half", Method: "GET"}, double, `"math.half": Method and Path`},
		{"bad method", operations.Descriptor{ID: "math.bad", Method: "TRACE", Path: "/x"}, double, `"math.bad": unsupported HTTP method`},
		{"bad status", operations.Descriptor{ID: "math.st", SuccessStatus: 404}, double, `"math.st": SuccessStatus 404`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := operations.Register(reg, tt.d, tt.fn)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Register(%+v) = %v, want an error containing %s", tt.d.ID, err, tt.want)
			}
		})
	}
	d, ok := reg.Lookup("math.double")
	if !ok || d.Method != "POST" || d.Input.Name() != "in" || d.Output.Name() != "out" {
		t.Fatalf("Lookup = %+v, %v", d, ok)
	}
	if reg.Len() != 1 || len(reg.All()) != 1 {
		t.Errorf("Len = %d, want 1 (failed registrations must not be added)", reg.Len())
	}
	// The handler accepts a pointer (what adapters decode into) or a value.
	for _, input := range []any{&in{N: 21}, in{N: 21}} {
		inv := pipeline.NewInvocation(pipeline.Spec{Operation: d, Input: input})
		res, err := d.Handler()(context.Background(), inv)
		if err != nil {
			t.Fatalf("handler(%T) = %v", input, err)
		}
		if got := res.(out).N; got != 42 {
			t.Errorf("handler(%T) output = %d, want 42", input, got)
		}
	}
	inv := pipeline.NewInvocation(pipeline.Spec{Operation: d, Input: "wrong"})
	if _, err := d.Handler()(context.Background(), inv); pipelinetest.KindOf(err) != pipeline.KindUnexpected {
		t.Errorf("handler(wrong input type) = %v, want UNEXPECTED", err)
	}
	if p, ok := d.NewInput().(*in); !ok || p == nil {
		t.Errorf("NewInput() = %T, want *in", d.NewInput())
	}
}

func TestGRPCNames(t *testing.T) {
	for id, want := range map[string][2]string{"orders.create": {"Orders", "Create"}, "inventory.v2.reserve": {"Inventory", "V2Reserve"}, "reports.export-csv": {"Reports", "ExportCsv"}} {
		if s, m := operations.GRPCNames(id); s != want[0] || m != want[1] {
			t.Errorf("GRPCNames(%q) = %q, %q, want %q, %q", id, s, m, want[0], want[1])
		}
	}
}
