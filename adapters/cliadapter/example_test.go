package cliadapter_test

import (
	"context"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/sundial-go/sundial/adapters/cliadapter"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
)

type greetInput struct {
	Name  string `json:"name"`
	Times int    `json:"times"`
}

type greeting struct {
	Text string `json:"text"`
}

// An operation "greet.hello" becomes the command "app greet hello" with
// the flags --name and --times; a failure's exit code follows its kind.
func ExampleAddCommands() {
	reg := operations.NewRegistry()
	err := operations.Register(reg, operations.Descriptor{ID: "greet.hello", Summary: "Say hello."},
		func(_ context.Context, in greetInput) (greeting, error) {
			if in.Name == "" {
				return greeting{}, pipeline.NewError(pipeline.KindValidation, "GREET_VALIDATION_001", "name must not be empty")
			}
			text := "hello"
			for range in.Times {
				text += " " + in.Name
			}
			return greeting{Text: text}, nil
		})
	if err != nil {
		panic(err)
	}
	run := func(args ...string) int {
		root := &cobra.Command{Use: "app"}
		root.SetOut(os.Stdout)
		root.SetErr(os.Stdout) // to show the failure in the example's output
		root.SetArgs(args)
		if err := cliadapter.AddCommands(root, reg, func() (*kernel.Kernel, error) {
			return kernel.New(kernel.WithRegistry(reg))
		}); err != nil {
			panic(err)
		}
		return cliadapter.Execute(context.Background(), root)
	}

	fmt.Println("exit", run("greet", "hello", "--name", "sundial", "--times", "2"))
	fmt.Println("exit", run("greet", "hello", "--input", `{"name":"json"}`, "--times", "1", "--output", "text"))
	fmt.Println("exit", run("greet", "hello", "--output", "text"))
	fmt.Println("exit", run("greet", "hello", "--timeout", "soon"))
	// Output:
	// {
	//   "text": "hello sundial sundial"
	// }
	// exit 0
	// text  hello json
	// exit 0
	// app greet hello: VALIDATION GREET_VALIDATION_001: name must not be empty
	// exit 2
	// app: invalid value "soon" for --timeout: not a finite number of seconds
	// Run 'app greet hello --help' for usage.
	// exit 2
}

func ExampleParseTimeout() {
	for _, s := range []string{"0.25", "30", "0", "abc"} {
		d, err := cliadapter.ParseTimeout(s)
		fmt.Println(d, err)
	}
	// Output:
	// 250ms <nil>
	// 30s <nil>
	// 0s cliadapter: timeout "0": must be greater than 0 seconds
	// 0s cliadapter: timeout "abc": not a finite number of seconds
}

func ExampleExitCodeFor() {
	for _, k := range []pipeline.Kind{pipeline.KindOK, pipeline.KindValidation, pipeline.KindTimeout, pipeline.KindCanceled} {
		fmt.Println(k, cliadapter.ExitCodeFor(k))
	}
	// Output:
	// OK 0
	// VALIDATION 2
	// TIMEOUT 7
	// CANCELLED 8
}
