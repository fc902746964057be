package httpadapter

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/labstack/echo/v4"

	"github.com/sundial-go/sundial/pipeline"
)

// This file carries a stream over a WebSocket (github.com/coder/websocket).
// Each message is one JSON text message. The caller ends its messages with
// an empty message. The last message is the outcome, {"outcome": ...},
// followed by a close frame whose code is 1000 on success, else 4000 plus
// the outcome's HTTP status (4504 for TIMEOUT), with the outcome's code as
// the reason.

// wsMsg is one message the reader goroutine read, or its error.
type wsMsg struct {
	data []byte
	err  error
}

// wsQueue is how many read messages wait for the handler's Recv. A
// caller who sends more waits: the reader stops reading, and TCP's flow
// control holds the caller. The server holds at most wsQueue+1 messages.
const wsQueue = 4

// wsRaw is a stream over a WebSocket: the transport's stream.Raw. A
// goroutine reads the caller's messages for the stream's life, into a
// queue of wsQueue, so that control frames are answered and a caller who
// leaves is seen at once, whatever the handler's pace.
type wsRaw struct {
	conn  *websocket.Conn
	limit int64 // the largest message
	// wctx ends when the stream is aborted: it unblocks a Send, and the
	// library then closes the connection.
	wctx    context.Context
	wcancel context.CancelFunc
	// leave ends the stream's parent context: the caller has gone.
	leave func(error)

	msgs    chan wsMsg
	mu      sync.Mutex
	held    chan struct{} // closed while the reader waits for room in msgs
	pong    chan error    // the outstanding ping's result (Heartbeat's goroutine only)
	pinging sync.WaitGroup
	closing chan struct{} // closed when the stream's outcome is written
	done    chan struct{} // closed when the reader has returned
	aborted chan struct{}
	abort   sync.Once

	// oneMessage: a server stream reads one message, its request; the
	// reader discards later ones.
	oneMessage bool
	eof        bool // Recv returned io.EOF (Recv's goroutine only)

	decode func([]byte) (any, *pipeline.Error)
}

// newWSRaw starts reading conn. leave is called once when the caller
// leaves or the connection fails.
func newWSRaw(conn *websocket.Conn, limit int64, oneMessage bool, leave func(error),
	decode func([]byte) (any, *pipeline.Error)) *wsRaw {
	conn.SetReadLimit(limit)
	w := &wsRaw{conn: conn, limit: limit, leave: leave, msgs: make(chan wsMsg, wsQueue), held: make(chan struct{}), closing: make(chan struct{}),
		done: make(chan struct{}), aborted: make(chan struct{}), oneMessage: oneMessage, decode: decode}
	w.wctx, w.wcancel = context.WithCancel(context.Background())
	go w.read()
	return w
}

// read reads the caller's messages until the connection ends. An empty
// message is the caller's last; later ones are discarded, as are those
// after a server stream's request.
func (w *wsRaw) read() {
	defer close(w.done)
	last := false
	for {
		_, data, err := w.conn.Read(context.Background())
		if err != nil {
			if errors.Is(err, websocket.ErrMessageTooBig) {
				err = messageTooLarge(w.limit)
			} else if !w.isAborted() {
				w.leave(err) // the caller left: the library has closed the connection
			}
			w.put(wsMsg{err: err})
			return
		}
		if last {
			continue
		}
		last = len(data) == 0 || w.oneMessage
		if !w.put(wsMsg{data: data}) {
			return
		}
	}
}

// put queues m for Recv, waiting for room while the queue is full; it
// reports false if the stream's outcome was written first.
func (w *wsRaw) put(m wsMsg) bool {
	select {
	case w.msgs <- m:
		return true
	default:
	}
	w.mu.Lock()
	close(w.held)
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.held = make(chan struct{})
		w.mu.Unlock()
	}()
	select {
	case w.msgs <- m:
		return true
	case <-w.closing:
		return false
	}
}

// heldChan returns a channel closed while the reader waits for the handler.
func (w *wsRaw) heldChan() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.held
}

// next returns the caller's next message; io.EOF after its empty one.
// It returns errAborted once the stream has ended, and TIMEOUT at
// deadline (zero: none).
func (w *wsRaw) next(deadline time.Time) ([]byte, error) {
	if w.eof {
		return nil, io.EOF
	}
	ctx := context.Background()
	if !deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	select {
	case m := <-w.msgs:
		if m.err != nil {
			w.eof = true
			return nil, m.err
		}
		if len(m.data) == 0 {
			w.eof = true
			return nil, io.EOF
		}
		return m.data, nil
	case <-w.aborted:
		return nil, errAborted
	case <-ctx.Done():
		return nil, pipeline.ErrTimeout()
	}
}

// Recv returns the caller's next message, decoded.
func (w *wsRaw) Recv() (any, int, error) {
	data, err := w.next(time.Time{})
	if err != nil {
		return nil, 0, err
	}
	return decodeMessage(w.decode, data)
}

// Send writes one message.
func (w *wsRaw) Send(m any) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return w.conn.Write(w.wctx, websocket.MessageText, b)
}

// Heartbeat sends a ping and waits for the caller's pong. The caller's
// library answers it while it reads, so a caller that reads nothing lets
// it block, and the send stall ends the stream. A ping is no message: it
// does not reset the idle clock. Abort unblocks it.
//
// The pong is read only while the reader reads. While the queue is full,
// the handler holds the caller, so Heartbeat waits for no pong: the idle
// clock and the send stall of the handler's own calls apply then. A ping
// unanswered then is waited for by the next Heartbeat; none is sent
// meanwhile.
func (w *wsRaw) Heartbeat() error {
	if w.pong == nil {
		pong := make(chan error, 1)
		w.pong = pong
		w.pinging.Add(1)
		go func() {
			defer w.pinging.Done()
			pong <- w.conn.Ping(w.wctx)
		}()
	}
	select {
	case err := <-w.pong:
		w.pong = nil
		return err
	case <-w.heldChan():
		return nil
	}
}

// isAborted reports whether Abort was called: a failure after it is the
// stream's end (a canceled Send closes the connection), not the caller's.
func (w *wsRaw) isAborted() bool {
	select {
	case <-w.aborted:
		return true
	default:
		return false
	}
}

// Abort unblocks Recv, and a Send, which closes the connection.
func (w *wsRaw) Abort(error) {
	w.abort.Do(func() { close(w.aborted) })
	w.wcancel()
}

// finish writes the stream's outcome, closes the connection with its
// code, and waits for the reader to return.
func (w *wsRaw) finish(err error, instance, traceID string) error {
	ctx, cancel := context.WithTimeout(context.Background(), outcomeWriteTimeout)
	defer cancel()
	werr := w.conn.Write(ctx, websocket.MessageText, outcomeLine(outcomeJSON(err, instance, traceID)))
	code, reason := websocket.StatusNormalClosure, ""
	if err != nil {
		e := pipeline.AsError(err)
		code, reason = websocket.StatusCode(4000+StatusFor(e.Kind())), e.Code()
	}
	close(w.closing)
	if werr != nil {
		_ = w.conn.CloseNow()
	} else if cerr := w.conn.Close(code, reason); cerr != nil {
		werr = cerr
	}
	w.wcancel()
	<-w.done
	w.pinging.Wait()
	return werr
}

// started reports true: after the upgrade, every outcome is in-band.
func (w *wsRaw) started() bool { return true }

// acceptWS upgrades c's request to a WebSocket, checking its origin as
// the library does: the request's own host only. The stream's parent
// context keeps parent's values; it ends when the caller leaves, since a
// hijacked request's context does not. On failure the library has
// answered the request.
func acceptWS(c echo.Context, parent context.Context, limit int64, oneMessage bool,
	decode func([]byte) (any, *pipeline.Error)) (*wsRaw, context.Context, context.CancelCauseFunc, error) {
	conn, err := websocket.Accept(c.Response(), c.Request(), nil)
	if err != nil {
		return nil, nil, nil, err
	}
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(parent))
	w := newWSRaw(conn, limit, oneMessage, cancel, decode)
	return w, ctx, cancel, nil
}

// isWebSocket reports whether r asks for a WebSocket upgrade.
func isWebSocket(r *http.Request) bool {
	return strings.EqualFold(r.Header.Get("Upgrade"), "websocket")
}
