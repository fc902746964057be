package mcpadapter

import "testing"

// TestCallReaderOwesEachRequest: a stdio session's input owes one answer
// per request, however the values are split into reads and whatever
// their strings hold; notifications, answers and values over the limit
// owe none.
func TestCallReaderOwesEachRequest(t *testing.T) {
	in := `{"jsonrpc":"2.0","id":1,"method":"a","params":{"s":"}]{[\"\\"}}` + "\n" +
		"{\n  \"jsonrpc\": \"2.0\",\n  \"id\": \"x\",\n  \"method\": \"b\"\n}\n" +
		`{"jsonrpc":"2.0","method":"notifications/c"}` + "\n" +
		`{"jsonrpc":"2.0","id":7,"result":{}}` + "\n" +
		`[{"jsonrpc":"2.0","id":2,"method":"d"},{"jsonrpc":"2.0","method":"e"}]` + "\n" +
		`{"jsonrpc":"2.0","id":3,"method":"f","params":{"pad":"` + string(make([]byte, 100)) + `"}}` + "\n"
	for _, chunk := range []int{1, 7, len(in)} {
		a := &stdioAnswers{s: &Server{}}
		c := &callReader{a: a, limit: 100}
		for i := 0; i < len(in); i += chunk {
			c.follow([]byte(in[i:min(i+chunk, len(in))]))
		}
		if n := a.owed.Load(); n != 3 {
			t.Errorf("reads of %d bytes: %d answers owed, want 3", chunk, n)
		}
	}
}
