package operations

import "github.com/sundial-go/sundial/pipeline"

// Names the tests use.
var (
	Group      = group
	Name       = name
	PascalCase = pascalCase
)

// MaxIDLength is the longest operation ID accepted.
const MaxIDLength = maxIDLength

// Len returns the number of registered operations.
func (r *Registry) Len() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return len(r.byID)
}

// CheckJSON is CheckJSON with d's input type and policy, as the adapters
// call it.
func (d *Descriptor) CheckJSON(data []byte) *pipeline.Error {
	return CheckJSON(d.Input, d.InputPolicy, data)
}
