package connectadapter_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/sundial-go/sundial/adapters/connectadapter"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
)

type greetIn struct {
	Name string `json:"name"`
}

type greetOut struct {
	Greeting string `json:"greeting"`
}

// A greeting served over Connect on the echo instance that serves the
// REST routes. A browser, connect-web, buf curl or plain curl posts the
// JSON message to /hello.v1.Greet/Say.
func Example() {
	reg := operations.NewRegistry()
	_ = operations.Register(reg, operations.Descriptor{ID: "greet.say"},
		func(_ context.Context, in greetIn) (greetOut, error) {
			return greetOut{Greeting: "Hello, " + in.Name + "!"}, nil
		})
	k, err := kernel.New(kernel.WithRegistry(reg))
	if err != nil {
		panic(err)
	}
	e := echo.New()
	if err := connectadapter.Mount(e, k, connectadapter.WithPackage("hello.v1"),
		connectadapter.WithCORS("https://app.example")); err != nil {
		panic(err)
	}
	srv := httptest.NewServer(e)
	defer srv.Close()

	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/hello.v1.Greet/Say", strings.NewReader(`{"name":"Ada"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Connect-Timeout-Ms", "2000")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		panic(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	fmt.Println(res.StatusCode, string(body))
	// Output: 200 {"greeting":"Hello, Ada!"}
}
