package telemetry

// MaxBaggageMembers is maxBaggageMembers, for the tests.
const MaxBaggageMembers = maxBaggageMembers
