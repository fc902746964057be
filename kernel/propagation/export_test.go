package propagation

// MaxBaggageMembers is maxBaggageMembers, for the tests.
const MaxBaggageMembers = maxBaggageMembers
