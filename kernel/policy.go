package kernel

import (
	"github.com/sundial-go/sundial/kernel/internal/config"
	"github.com/sundial-go/sundial/resilience"
	"github.com/sundial-go/sundial/resilience/idempotency"
)

// policies is the parsed section Sundial.Kernel.Resilience: defaults for
// every operation, and per-operation overrides. Its keys, their bounds and
// how they merge are the table of package kernel/internal/config
// (docs/policy-keys.md). Its zero value configures nothing.
type policies struct{ config.Policies }

// parsePolicies parses the Resilience section. raw is the section as
// decoded from JSON (nil means an empty section) and path is its key path
// for error messages, e.g. "Sundial.Kernel.Resilience".
func parsePolicies(raw any, path string) (policies, error) {
	p, err := config.Parse(raw, path)
	return policies{p}, err
}

// policyFor returns the merged policy of the operation id: its overrides,
// then the section's defaults for the keys it does not set, then the
// built-in defaults.
func (o policies) policyFor(id string) resilience.Policy { return o.Resolve(id).Policy }

// idempotencyFor returns the merged idempotency policy of the operation id
// (the operation's Idempotency object replaces the section default's
// whole; the zero Policy when it is not enabled).
func (o policies) idempotencyFor(id string) idempotency.Policy { return o.Resolve(id).Idempotency }

// operationIDs returns the IDs that have overrides, sorted.
func (o policies) operationIDs() []string { return o.OperationIDs() }

// maxInt bounds integer keys so that conversions never overflow, even
// where int is 32 bits wide.
const maxInt = config.MaxInt

// number returns a decoded JSON number as a float64.
func number(v any) (float64, bool) { return config.Number(v) }

// jsonType names the JSON type of a decoded value, for error messages.
func jsonType(v any) string { return config.JSONType(v) }
