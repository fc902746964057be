// Package priority reads a call's class (pipeline.Priority) from what a
// caller sends. The sources are the Sundial-Priority header, the gRPC
// metadata entry and the CLI's --priority. The baggage member
// propagation.BaggagePriority and the Priority policy key are sources too.
package priority

import "github.com/sundial-go/sundial/pipeline"

// Parse returns the class named s and whether s names one. The names are
// "critical", "default" and "sheddable", in any ASCII case, without
// surrounding spaces.
func Parse(s string) (pipeline.Priority, bool) {
	var b [len("sheddable")]byte
	if len(s) > len(b) {
		return pipeline.PriorityDefault, false
	}
	for i := range len(s) {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		b[i] = c
	}
	switch string(b[:len(s)]) {
	case "critical":
		return pipeline.PriorityCritical, true
	case "default":
		return pipeline.PriorityDefault, true
	case "sheddable":
		return pipeline.PrioritySheddable, true
	}
	return pipeline.PriorityDefault, false
}
