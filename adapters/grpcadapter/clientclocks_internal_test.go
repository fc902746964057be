package grpcadapter

import (
	"testing"

	rstream "github.com/sundial-go/sundial/resilience/stream"
)

// TestOutboundClockCodes holds the outbound clocks' codes equal to a
// served stream's: one wire value per clock, whichever side ended it.
func TestOutboundClockCodes(t *testing.T) {
	if codeStreamIdle != rstream.CodeIdle || codeStreamSendStall != rstream.CodeSendStall {
		t.Fatalf("outbound codes %s, %s; served %s, %s",
			codeStreamIdle, codeStreamSendStall, rstream.CodeIdle, rstream.CodeSendStall)
	}
}
