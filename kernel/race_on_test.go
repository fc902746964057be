//go:build race

package kernel_test

// raceOn reports whether the test binary has the race detector, which
// makes every frame larger.
const raceOn = true
