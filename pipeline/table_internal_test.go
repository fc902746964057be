package pipeline

import "testing"

// TestLastConstants: KindUnexpected and StageHandle end their sets, so
// code outside the package can walk every kind and every stage.
func TestLastConstants(t *testing.T) {
	if KindUnexpected != numKinds-1 || StageHandle != numStages-1 {
		t.Fatal("KindUnexpected or StageHandle is not the last of its set")
	}
}
