package pipeline

// Stage is a coarse position in the pipeline. Stages run in a fixed order;
// within a stage the built-in middleware comes first, then application
// middleware in registration order.
type Stage uint8

// The stages, in execution order.
const (
	// StageDiagnostics: application diagnostics (request logging, debug
	// hooks). It is outermost, outside the DeadlineMiddleware, so it sees
	// the final, attributed outcome. The kernel's own tracing, metrics and access log
	// observe every invocation at the kernel's edge, around the chain.
	StageDiagnostics Stage = iota
	// StageResilience: the deadline, then per-operation breaker, rate limit
	// and concurrency limit; application limiters (per tenant, ...) after.
	StageResilience
	// StageAuthentication: who is calling.
	StageAuthentication
	// StageTenant: which tenant the call is for.
	StageTenant
	// StageAuthorization: may the caller do this.
	StageAuthorization
	// StageValidation: is the input well-formed (built-in: inputs that
	// implement Validate() error are validated here).
	StageValidation
	// StageHandle: last application middleware, then the handler.
	StageHandle

	numStages
)

var stageNames = [numStages]string{
	"Diagnostics", "Resilience", "Authentication", "Tenant", "Authorization", "Validation", "Handle",
}

// valid reports whether s is one of the defined stages.
func (s Stage) valid() bool { return s < numStages }

// String returns the stage's name, e.g. "Resilience".
func (s Stage) String() string {
	if !s.valid() {
		return "Stage(invalid)"
	}
	return stageNames[s]
}
