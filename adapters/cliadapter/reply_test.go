package cliadapter

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience/idempotency"
)

// executeMixed runs `app args...` with stdout and stderr written to one
// buffer, in the order they were written.
func executeMixed(t *testing.T, kf kernelFunc, args ...string) (int, string) {
	t.Helper()
	root := &cobra.Command{Use: "app"}
	if err := AddCommands(root, testRegistry(t), kf, WithSignals()); err != nil {
		t.Fatal(err)
	}
	var both bytes.Buffer
	root.SetArgs(args)
	root.SetOut(&both)
	root.SetErr(&both)
	code := Execute(context.Background(), root)
	return code, both.String()
}

// noting is application middleware that adds the note line to the
// invocation's Reply.
func noting(line string) kernel.Option {
	return kernel.UseAt(pipeline.StageDiagnostics, pipeline.MiddlewareFunc(func(ctx context.Context, inv *pipeline.Invocation, next pipeline.Handler) (any, error) {
		inv.Reply().Note(line)
		return next(ctx, inv)
	}))
}

// TestReplyNotesOnStderr: a note a middleware adds to the invocation's
// Reply is a line on stderr: after a failure's message, before a
// success's output.
func TestReplyNotesOnStderr(t *testing.T) {
	kf := kernelOn(testRegistry(t), noting("note: served by replica-a"))
	code, got := executeMixed(t, kf, "test", "echo", "--name", "x")
	if code != exitOK || !strings.HasPrefix(got, "note: served by replica-a\n{") || strings.Count(got, "note:") != 1 {
		t.Errorf("success: exit %d, output %q; want the note once, then the result", code, got)
	}
	code, got = executeMixed(t, kf, "test", "fail", "--kind", "NOT_FOUND")
	lines := strings.Split(strings.TrimSuffix(got, "\n"), "\n")
	if code != exitNotFound || len(lines) < 2 || !strings.HasPrefix(lines[0], "{") ||
		lines[len(lines)-1] != "note: served by replica-a" || strings.Count(got, "note:") != 1 {
		t.Errorf("failure: exit %d, stderr %q; want the problem, then the note", code, got)
	}
}

// TestReplyReplayNoteOnce: a replayed outcome whose Reply carries the
// replay mark and its note (as the idempotency middleware adds them)
// prints the note once, and a first call none.
func TestReplyReplayNoteOnce(t *testing.T) {
	store := idempotency.NewMemoryStore(idempotency.MemoryConfig{})
	mark := kernel.UseAt(pipeline.StageDiagnostics, pipeline.MiddlewareFunc(func(ctx context.Context, inv *pipeline.Invocation, next pipeline.Handler) (any, error) {
		out, err := next(ctx, inv)
		return out, err
	}))
	kf := kernelOn(testRegistry(t), mark, kernel.WithIdempotencyStore(store),
		kernel.WithConfigJSON([]byte(`{"Sundial":{"Kernel":{"Resilience":{"Operations":{"test.echo":{"Idempotency":{}}}}}}}`)))
	const note = "replayed: the stored outcome of an earlier call with idempotency key k1\n"
	for i, want := range []int{0, 1} {
		code, got := executeMixed(t, kf, "test", "echo", "--name", "x", "--idempotency-key", "k1")
		if code != exitOK || strings.Count(got, note) != want || (want == 1 && !strings.HasPrefix(got, note)) {
			t.Errorf("call %d: exit %d, output %q; want the replay note %d times, first", i+1, code, got, want)
		}
	}
}
