package httpadapter_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sundial-go/sundial/adapters/httpadapter"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
)

type Greeting struct {
	Name string `json:"name"`
}

type Reply struct {
	Text string `json:"text"`
}

func ExampleMount() {
	reg := operations.NewRegistry()
	_ = operations.Register(reg, operations.Descriptor{ID: "greetings.create", Method: "POST", Path: "/greetings"},
		func(ctx context.Context, in Greeting) (Reply, error) {
			if in.Name == "" {
				return Reply{}, pipeline.NewError(pipeline.KindValidation, "APP_VALIDATION_001", "name must not be empty").WithDetail("field", "name")
			}
			return Reply{Text: "hello, " + in.Name}, nil
		})
	k, err := kernel.New(kernel.WithRegistry(reg))
	if err != nil {
		panic(err)
	}
	e := echo.New() // the application's echo: its middleware and routes stay
	if _, err := httpadapter.Mount(e, k); err != nil {
		panic(err)
	}
	srv := httptest.NewServer(e) // listens on 127.0.0.1
	defer srv.Close()

	for _, body := range []string{`{"name":"Ada"}`, `{"name":""}`, `{"name":42}`} {
		resp, err := http.Post(srv.URL+"/greetings", "application/json", strings.NewReader(body))
		if err != nil {
			panic(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(resp.StatusCode, resp.Header.Get("Content-Type"))
		fmt.Println(string(b))
	}
	http.DefaultClient.CloseIdleConnections()
	// Output:
	// 201 application/json
	// {"text":"hello, Ada"}
	// 400 application/problem+json
	// {"type":"urn:sundial:error:APP_VALIDATION_001","title":"VALIDATION","status":400,"detail":"name must not be empty","instance":"/greetings","code":"APP_VALIDATION_001","traceId":"","details":{"field":"name"}}
	// 400 application/problem+json
	// {"type":"urn:sundial:error:HTTP_VALIDATION_002","title":"VALIDATION","status":400,"detail":"The field 'name' must be a string; got number.","instance":"/greetings","code":"HTTP_VALIDATION_002","traceId":"","details":{"expected":"string","field":"name"}}
}

// A retry loop whose attempts, back-offs and local work all spend the one
// budget on the context: the Transport writes what is left on every
// attempt, so the server sees less time on each.
func ExampleTransport() {
	var seen []int
	calls := 0
	inventory := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ms, _ := strconv.Atoi(r.Header.Get(httpadapter.DefaultRelativeDeadlineHeader))
		seen = append(seen, ms)
		if calls++; calls < 3 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer inventory.Close()

	// Give the Transport only to clients of internal services.
	client := &http.Client{Transport: httpadapter.NewTransport(nil)}
	defer client.CloseIdleConnections()

	// In a handler, ctx is the invocation's context: it already carries
	// the caller's deadline. Here we make a 2 s budget.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	const attempts, backoff = 3, 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, inventory.URL+"/stock", nil)
		resp, err := client.Do(req)
		if err != nil {
			fmt.Println("gave up:", err) // the deadline passed, or the network failed
			return
		}
		resp.Body.Close()
		fmt.Printf("attempt %d: %d\n", attempt, resp.StatusCode)
		if resp.StatusCode != http.StatusServiceUnavailable || attempt == attempts {
			break
		}
		select { // the back-off spends the budget too
		case <-time.After(backoff):
		case <-ctx.Done():
			fmt.Println("gave up:", ctx.Err())
			return
		}
	}
	fmt.Println("each attempt had less time left:", seen[0] <= 2000 && seen[1] < seen[0] && seen[2] < seen[1])
	// Output:
	// attempt 1: 503
	// attempt 2: 503
	// attempt 3: 200
	// each attempt had less time left: true
}
