package kernel

// WithEnviron replaces os.Environ as the source of WithEnv's variables.
var WithEnviron = withEnviron
