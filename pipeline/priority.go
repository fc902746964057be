package pipeline

// Priority is an invocation's criticality class: what a full limit sheds
// first (docs/resilience.md, "Priority"). The zero value is
// PriorityDefault. Classes are ordered: PrioritySheddable <
// PriorityDefault < PriorityCritical, so the lower of two is min(a, b).
type Priority int8

// The classes.
const (
	// PrioritySheddable: work that may be dropped first under load
	// (prefetches, batch jobs, retries of best-effort work).
	PrioritySheddable Priority = -1
	// PriorityDefault: the class of every operation that configures none.
	PriorityDefault Priority = 0
	// PriorityCritical: work a user waits for (a checkout, a login).
	PriorityCritical Priority = 1
)

// String returns "critical", "default" or "sheddable" (a value outside
// the three reads as the nearest class).
func (p Priority) String() string {
	switch {
	case p >= PriorityCritical:
		return "critical"
	case p <= PrioritySheddable:
		return "sheddable"
	}
	return "default"
}
