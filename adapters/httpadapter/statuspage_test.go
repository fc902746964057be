package httpadapter_test

import (
	"context"
	"strings"
	"testing"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
)

// TestStatusPageShowsTheLimit: over 127.0.0.1, the status page shows each
// operation's calls in flight of the limit enforced, and the adaptive
// controller's limit — marked "(shadow)" when it only reports it.
func TestStatusPageShowsTheLimit(t *testing.T) {
	reg := operations.NewRegistry()
	for _, id := range []string{"orders.create", "orders.list", "orders.plain"} {
		if err := operations.Register(reg, operations.Descriptor{ID: id}, func(context.Context, struct{}) (struct{}, error) { return struct{}{}, nil }); err != nil {
			t.Fatal(err)
		}
	}
	k, err := kernel.New(kernel.WithRegistry(reg), kernel.WithConfigJSON([]byte(`{"Sundial":{"Kernel":{"Resilience":{"Operations":{
		"orders.create":{"ConcurrencyLimit":"adaptive","Adaptive":{"InitialLimit":30}},
		"orders.list":{"ConcurrencyLimit":100,"Adaptive":{"Shadow":true}},
		"orders.plain":{"ConcurrencyLimit":7}}}}}}`)))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	page := fetchStatusPage(t, k)
	for _, want := range []string{
		`adaptive concurrency<br>`,
		`<td class="limit">0 of 30<br>adaptive 30</td>`,
		`<td class="limit">0 of 100<br>adaptive 20 (shadow)</td>`,
		`<td class="limit">0 of 7</td>`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the status page lacks %q:\n%s", want, page)
		}
	}
}
