package mcpadapter

import (
	"context"
	"net/http"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestInitializeAfterItsRequestEnded: the SDK may run an initialize after
// its HTTP request ended and gave its place back. Another request may hold
// that place now, so the late initialize opens no session.
func TestInitializeAfterItsRequestEnded(t *testing.T) {
	s := &Server{}
	called := 0
	next := func(context.Context, string, mcp.Request) (mcp.Result, error) {
		called++
		return &mcp.InitializeResult{}, nil
	}
	srv := mcp.NewServer(&mcp.Implementation{Name: "t", Version: "1"}, nil)
	st, _ := mcp.NewInMemoryTransports()
	ss, err := srv.Connect(t.Context(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	h := http.Header{}
	h.Set(placeHeader, "1") // given back: not among the places taken
	req := &mcp.ServerRequest[*mcp.InitializeParams]{Session: ss, Params: &mcp.InitializeParams{}, Extra: &mcp.RequestExtra{Header: h}}
	if _, err := s.admitSession(next)(t.Context(), "initialize", req); err == nil || called != 0 {
		t.Fatalf("an initialize whose place was given back: err %v, handler run %d times; want refused", err, called)
	}
	s.places.taken = map[string]struct{}{"1": {}}
	if _, err := s.admitSession(next)(t.Context(), "initialize", req); err != nil || called != 1 {
		t.Fatalf("an initialize that holds its place: err %v, handler run %d times; want run once", err, called)
	}
}
