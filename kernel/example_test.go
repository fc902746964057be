package kernel_test

import (
	"context"
	"fmt"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
)

type Greeting struct {
	Name string `json:"name"`
}

type Reply struct {
	Text string `json:"text"`
}

// Register an operation, add an application middleware at a stage, build
// the kernel and call the operation in-process.
func Example() {
	reg := operations.NewRegistry()
	err := operations.Register(reg, operations.Descriptor{
		ID: "greetings.say", Summary: "Say hello.", Method: "POST", Path: "/greetings",
	}, func(ctx context.Context, in Greeting) (Reply, error) {
		return Reply{Text: "hello, " + in.Name}, nil
	})
	if err != nil {
		panic(err)
	}
	audit := pipeline.MiddlewareFunc(func(ctx context.Context, inv *pipeline.Invocation, next pipeline.Handler) (any, error) {
		out, err := next(ctx, inv)
		fmt.Printf("audit: %s -> %s\n", inv.OperationID(), pipelinetest.KindOf(err))
		return out, err
	})
	k, err := kernel.New(
		kernel.WithRegistry(reg),
		kernel.WithConfigJSON([]byte(`{"Sundial":{"Kernel":{"Resilience":{"TimeoutSeconds":2}}}}`)),
		kernel.UseAt(pipeline.StageAuthorization, audit),
	)
	if err != nil {
		panic(err)
	}
	out, err := kernel.Call[Greeting, Reply](context.Background(), k, "greetings.say", Greeting{Name: "Ada"})
	fmt.Println(out.Text, err)
	// Output:
	// audit: greetings.say -> OK
	// hello, Ada <nil>
}
