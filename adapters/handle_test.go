package adapters_test

import "github.com/sundial-go/sundial/kernel"

// opOf returns the handle of the operation id in k, or nil.
func opOf(k *kernel.Kernel, id string) *kernel.Op {
	for _, op := range k.Operations() {
		if op.Descriptor().ID == id {
			return op
		}
	}
	return nil
}
