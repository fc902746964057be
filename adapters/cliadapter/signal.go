package cliadapter

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sync"
)

// signalError is the cause of an invocation context canceled by a signal
// (see context.Cause). It is a cancellation, not a deadline: the kernel
// attributes it as CANCELLED unless the deadline had fired first.
type signalError struct{ Signal os.Signal }

func (e *signalError) Error() string {
	return fmt.Sprintf("cliadapter: received %v", e.Signal)
}

// interrupts is like signal.NotifyContext with a second stage. The first
// signal cancels the context, with cause *signalError. A second signal
// calls onSecond, which exits the process at once. stop releases the
// signals and waits for the watcher goroutine.
//
// It reads signals from a channel, so tests can feed it without signalling
// the process. notify fills that channel from the OS.
type interrupts struct {
	ctx      context.Context
	cancel   context.CancelCauseFunc
	onSecond func(os.Signal)
	release  func() // signal.Stop, or nothing for a test channel
	done     chan struct{}
	wg       sync.WaitGroup
	once     sync.Once
}

// notify starts watching sigs. With no signals it watches nothing and
// returns a context that only parent ends.
func notify(parent context.Context, onSecond func(os.Signal), sigs ...os.Signal) *interrupts {
	if len(sigs) == 0 {
		return watch(parent, nil, onSecond, func() {})
	}
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, sigs...)
	return watch(parent, ch, onSecond, func() { signal.Stop(ch) })
}

// watch starts the watcher over ch (nil: never a signal).
func watch(parent context.Context, ch <-chan os.Signal, onSecond func(os.Signal), release func()) *interrupts {
	ctx, cancel := context.WithCancelCause(parent)
	in := &interrupts{ctx: ctx, cancel: cancel, onSecond: onSecond, release: release, done: make(chan struct{})}
	if ch == nil {
		return in
	}
	in.wg.Go(func() {
		select {
		case sig := <-ch:
			cancel(&signalError{Signal: sig})
		case <-in.done:
			return
		}
		select {
		case sig := <-ch:
			in.onSecond(sig)
		case <-in.done:
		}
	})
	return in
}

// stop releases the signals, cancels the context and waits for the
// watcher to return. It is idempotent.
func (in *interrupts) stop() {
	in.once.Do(func() {
		in.release()
		close(in.done)
		in.cancel(context.Canceled)
		in.wg.Wait()
	})
}
