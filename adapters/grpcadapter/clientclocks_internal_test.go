package grpcadapter

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/sundial-go/sundial/adapters/internal/outclock"
	rstream "github.com/sundial-go/sundial/resilience/stream"
)

// TestOutboundClockCodes holds the outbound clocks' codes equal to a
// served stream's: one wire value per clock, whichever side ended it.
func TestOutboundClockCodes(t *testing.T) {
	if outclock.CodeIdle != rstream.CodeIdle || outclock.CodeSendStall != rstream.CodeSendStall {
		t.Fatalf("outbound codes %s, %s; served %s, %s",
			outclock.CodeIdle, outclock.CodeSendStall, rstream.CodeIdle, rstream.CodeSendStall)
	}
}

// TestOutboundClocksStopWhenTheCallerCancels: a caller that ends a stream
// by cancelling its context, and never receives again, stops the clocks'
// timer; it does not fire every send-stall period for ever.
func TestOutboundClocksStopWhenTheCallerCancels(t *testing.T) {
	streamer := func(context.Context, *grpc.StreamDesc, *grpc.ClientConn, string, ...grpc.CallOption) (grpc.ClientStream, error) {
		return nil, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	cs, err := StreamClientInterceptor(0)(ctx, &grpc.StreamDesc{ServerStreams: true}, nil, "/x.v1.X/Y", streamer,
		WithStreamClocks(0, 20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	k := cs.(*clientStream).clocks
	cancel()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if k.Stopped() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the clocks still run after the caller cancelled")
		}
	}
}
