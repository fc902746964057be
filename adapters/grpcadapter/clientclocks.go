package grpcadapter

import (
	"time"

	"google.golang.org/grpc"
)

// WithStreamClocks returns a call option that gives an outbound stream
// two clocks of a served stream's, with StreamClientInterceptor
// installed. idle ends the stream when no message was sent or received
// for it: TIMEOUT, KERNEL_TIMEOUT_003. sendStall ends it when one SendMsg
// is blocked for it, the server not reading: CANCELLED,
// KERNEL_CANCELLED_002. Either ends the stream's context, so a blocked
// SendMsg or RecvMsg returns the outcome. 0 turns a clock off.
func WithStreamClocks(idle, sendStall time.Duration) grpc.CallOption {
	return streamClocks{idle: max(idle, 0), stall: max(sendStall, 0)}
}

type streamClocks struct {
	grpc.EmptyCallOption
	idle, stall time.Duration
}

// clocksFor returns the last WithStreamClocks among opts.
func clocksFor(opts []grpc.CallOption) (streamClocks, bool) {
	var c streamClocks
	found := false
	for _, o := range opts {
		if sc, ok := o.(streamClocks); ok {
			c, found = sc, true
		}
	}
	return c, found && (c.idle > 0 || c.stall > 0)
}
