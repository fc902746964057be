package mcpadapter_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sundial-go/sundial/adapters/mcpadapter"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
)

type helloIn struct {
	Name string `json:"name" validate:"required,max=20"`
}

type helloOut struct {
	Text string `json:"text"`
}

// An operation served as an MCP tool over Streamable HTTP, called by the
// SDK's client: once with good arguments, once with a missing name.
func Example() {
	reg := operations.NewRegistry()
	_ = operations.Register(reg, operations.Descriptor{ID: "greet.hello", Summary: "Say hello."},
		func(_ context.Context, in helloIn) (helloOut, error) {
			return helloOut{Text: "Hello, " + in.Name + "!"}, nil
		})
	k, _ := kernel.New(kernel.WithRegistry(reg))
	m, _ := mcpadapter.New(k, nil)
	defer m.Shutdown(context.Background()) // before the HTTP server's
	// With echo: e.Any("/mcp", echo.WrapHandler(m)).
	srv := httptest.NewServer(m)
	defer srv.Close()

	ctx := context.Background()
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	client := mcp.NewClient(&mcp.Implementation{Name: "example", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: srv.URL, HTTPClient: hc}, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cs.Close()
	tools, _ := cs.ListTools(ctx, nil)
	for _, t := range tools.Tools {
		fmt.Printf("%s: %s\n", t.Name, t.Description)
	}
	for _, args := range []map[string]any{{"name": "Ada"}, {}} {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "greet.hello", Arguments: args,
			Meta: mcp.Meta{"sundial/timeoutMs": 2000}})
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(res.IsError, res.Content[0].(*mcp.TextContent).Text)
	}
	// Output:
	// greet.hello: Say hello.
	// false {"text":"Hello, Ada!"}
	// true invalid arguments: /name is required; correct them and call again (KERNEL_VALIDATION_007).
}
