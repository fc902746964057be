package idempotency

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"time"

	"github.com/sundial-go/sundial/pipeline"
)

// Config builds the middleware of [New].
type Config struct {
	// Operation is the operation's ID.
	Operation string
	// Policy is the operation's policy.
	Policy Policy
	// Store keeps the records (required).
	Store Store
	// Scope returns the caller's scope of an idempotency key — its
	// principal or tenant, as the application's authentication or tenant
	// middleware put it in the context — or "" for none (nil: none). Keys
	// of different scopes never meet.
	Scope func(ctx context.Context, inv *pipeline.Invocation) string
	// NewOutput returns a pointer to a new zero value of the operation's
	// output type, into which a replayed success is decoded (nil: the
	// replayed output is a json.RawMessage).
	NewOutput func() any
	// StoreTimeout bounds each store call (1 s when zero). Store calls
	// after the handler returned do not inherit its context's end.
	StoreTimeout time.Duration
	// Logger receives store failures after the handler ran (discarded when
	// nil).
	Logger *slog.Logger
	// Mark sets Reply.Replayed on a replayed outcome: the mark the
	// invocations were made with (nil: the field and note only).
	Mark *pipeline.ReplayMark
}

// middleware applies an operation's idempotency policy.
type middleware struct{ c Config }

// New returns the middleware that applies c's idempotency policy (see the
// package documentation). The kernel places it first in the Handle stage:
// after the limits (a call they reject never claims its key) and after
// authentication and tenant middleware (whose context the Scope reads).
func New(c Config) pipeline.Middleware {
	if c.StoreTimeout <= 0 {
		c.StoreTimeout = time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return &middleware{c: c}
}

// Codes of the middleware's own outcomes: a required key is missing (400);
// a call ran but its outcome could not be kept (409: too large, or not JSON).
const (
	codeKeyMissing = "KERNEL_VALIDATION_004"
	codeTooLarge   = "KERNEL_CONFLICT_002"
)

// Errors of the middleware.
func errMissing() *pipeline.Error {
	return pipeline.NewError(pipeline.KindValidation, codeKeyMissing,
		"This operation requires an idempotency key (HTTP Idempotency-Key, gRPC metadata idempotency-key, CLI --idempotency-key).")
}

func errInProgress() *pipeline.Error {
	return pipeline.NewError(pipeline.KindConflict, CodeInProgress,
		"A call with this idempotency key is still running; retry later for its outcome.").WithRetryAfter(inProgressRetryAfter)
}

func errMismatch() *pipeline.Error {
	return pipeline.NewError(pipeline.KindUnprocessable, CodeMismatch,
		"This idempotency key was used with a different input; use a new key for a new request.")
}

func errTooLarge() *pipeline.Error {
	return pipeline.NewError(pipeline.KindConflict, codeTooLarge,
		"A call with this idempotency key already ran; its outcome was too large to keep for replay.")
}

func errNoJSON() *pipeline.Error {
	return pipeline.NewError(pipeline.KindConflict, codeTooLarge,
		"A call with this idempotency key already ran; its outcome has no JSON form (a NaN or infinite number, say), so it was not kept for replay.")
}

func errStore(err error) *pipeline.Error {
	return pipeline.Wrap(pipeline.KindUnavailable, CodeStore,
		"The idempotency store is unavailable; nothing ran.", err).WithRetryAfter(time.Second)
}

// Invoke implements pipeline.Middleware.
func (m *middleware) Invoke(ctx context.Context, inv *pipeline.Invocation, next pipeline.Handler) (any, error) {
	key := inv.IdempotencyKey()
	if key == "" {
		if m.c.Policy.Required {
			return nil, errMissing()
		}
		return next(ctx, inv)
	}
	if !ValidKey(key) {
		return nil, ErrKeyMalformed()
	}
	fp, err := fingerprint(inv.Input())
	if err != nil {
		var uv *json.UnsupportedValueError
		if errors.As(err, &uv) { // a NaN or infinite number, sent over gRPC or the CLI
			return nil, pipeline.Wrap(pipeline.KindValidation, pipeline.CodeValidation,
				"The input has no JSON form ("+uv.Str+"), so a call with an idempotency key cannot be matched with its retries; send finite numbers.", err)
		}
		return nil, pipeline.Wrap(pipeline.KindUnexpected, pipeline.CodeUnexpected, "idempotency: input cannot be fingerprinted", err)
	}
	scope := ""
	if m.c.Scope != nil {
		scope = m.c.Scope(ctx, inv)
	}
	skey := scopedKey(m.c.Operation, scope, key)
	sctx, cancel := m.storeContext(ctx)
	token, rec, err := m.c.Store.Claim(sctx, skey, fp, m.c.Store.Lease())
	cancel()
	if err != nil {
		return nil, errStore(err)
	}
	if rec != nil {
		switch {
		case rec.Fingerprint != fp:
			return nil, errMismatch()
		case !rec.Done:
			return nil, errInProgress()
		}
		m.markReplayed(inv)
		return m.decode(rec.Outcome)
	}
	return m.run(ctx, inv, next, skey, fp, token)
}

// run runs the rest of the chain under the claim. It settles the claim
// when the chain returns or panics. The kernel recovers a handler's
// panic, but a panic in a middleware below this one unwinds through here.
// The claim must not stay running, its lease renewed for as long as the
// process lives. A panic settles as the UNEXPECTED outcome the kernel
// answers for it, and goes on unwinding.
func (m *middleware) run(ctx context.Context, inv *pipeline.Invocation, next pipeline.Handler, skey, fp, token string) (out any, herr error) {
	stop := m.renew(skey, token)
	panicked := true
	defer func() {
		stop()
		if panicked {
			out, herr = nil, pipeline.Wrap(pipeline.KindUnexpected, pipeline.CodeUnexpected, pipeline.UnexpectedMessage,
				errors.New("idempotency: a middleware after the claim panicked"))
		}
		m.settle(ctx, skey, fp, token, out, herr)
	}()
	out, herr = next(ctx, inv)
	panicked = false
	return out, herr
}

func (m *middleware) storeContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), m.c.StoreTimeout)
}

// renew keeps a leased claim alive while the handler runs; the returned
// function stops it and waits for it.
func (m *middleware) renew(key, token string) func() {
	lease := m.c.Store.Lease()
	if lease <= 0 {
		return func() {}
	}
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(max(lease/3, time.Millisecond)) // NewTicker panics on a non-positive interval
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				ctx, cancel := context.WithTimeout(context.Background(), m.c.StoreTimeout)
				if err := m.c.Store.Renew(ctx, key, token, lease); err != nil {
					m.c.Logger.Warn("idempotency: lease renewal failed", "operation", m.c.Operation, "error", err.Error())
				}
				cancel()
			}
		}
	}()
	return func() { close(quit); <-done }
}

// forgets reports whether an outcome frees the key instead of being
// stored. TIMEOUT, CANCELLED and UNAVAILABLE say "try again". A handler
// returning one has, by contract, not completed its effect. Or it passed
// on a downstream's outcome that carries the same key. So does any outcome
// with a retry-after (a CONFLICT "retry in 5 s" from the handler, say):
// replaying it for the whole retention would tell the caller to retry a
// call whose answer could never change.
func forgets(err error) bool {
	e := pipeline.AsError(err)
	switch e.Kind() {
	case pipeline.KindTimeout, pipeline.KindCanceled, pipeline.KindUnavailable:
		return true
	}
	_, retry := e.RetryAfter()
	return retry
}

// settle stores the handler's outcome, or frees the key. An outcome the
// store has no room for is stored as KERNEL_CONFLICT_002 (already ran,
// too large to replay), which keeps the key taken; if even that does not
// fit, the key is freed and the failure logged.
func (m *middleware) settle(ctx context.Context, key, fp, token string, out any, herr error) {
	sctx, cancel := m.storeContext(ctx)
	defer cancel()
	var err error
	if herr != nil && forgets(herr) {
		err = m.c.Store.Release(sctx, key, token)
	} else {
		b := encode(out, herr)
		if len(b) > m.c.Policy.maxOutcome() {
			b = encode(nil, errTooLarge())
		}
		err = m.c.Store.Finish(sctx, key, token, fp, b, m.c.Policy.retention())
		if errors.Is(err, ErrTooLarge) {
			if err = m.c.Store.Finish(sctx, key, token, fp, encode(nil, errTooLarge()), m.c.Policy.retention()); errors.Is(err, ErrTooLarge) {
				err = errors.Join(err, m.c.Store.Release(sctx, key, token))
			}
		}
	}
	if err != nil {
		lvl := slog.LevelError
		if errors.Is(err, ErrFenced) {
			lvl = slog.LevelWarn
		}
		m.c.Logger.Log(sctx, lvl, "idempotency: outcome not recorded", "operation", m.c.Operation, "error", err.Error())
	}
}

// stored is a recorded outcome.
type stored struct {
	Out        json.RawMessage `json:"out,omitempty"`
	Kind       string          `json:"kind,omitempty"`
	Code       string          `json:"code,omitempty"`
	Message    string          `json:"msg,omitempty"`
	Details    map[string]any  `json:"details,omitempty"`
	RetryAfter int64           `json:"retryMs,omitempty"`
}

func encode(out any, herr error) []byte {
	var s stored
	if herr != nil {
		e := pipeline.AsError(herr)
		s.Kind, s.Code = e.Kind().String(), e.Code()
		if e.Kind() == pipeline.KindUnexpected {
			// Nothing of an unexpected error is shown, so nothing is kept.
			s.Code, s.Message = pipeline.CodeUnexpected, "An unexpected error occurred."
		} else {
			s.Message, s.Details = e.Message(), e.Details()
			if d, ok := e.RetryAfter(); ok {
				s.RetryAfter = d.Milliseconds()
			}
		}
	} else {
		b, err := json.Marshal(out)
		if err != nil {
			// The caller had its success; a replay cannot give it back, and
			// must not turn it into a failure.
			return encode(nil, errNoJSON())
		}
		s.Out = b
	}
	b, err := json.Marshal(s)
	if err != nil { // details that do not encode
		s.Details = nil
		b, _ = json.Marshal(s)
	}
	return b
}

// numbers turns the json.Numbers of a decoded detail into int64 when
// they are integers that fit, float64 otherwise, through maps and slices.
func numbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	case map[string]any:
		for k, e := range x {
			x[k] = numbers(e)
		}
	case []any:
		for i, e := range x {
			x[i] = numbers(e)
		}
	}
	return v
}

func (m *middleware) decode(b []byte) (any, error) {
	var s stored
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber() // integers in details come back exact, as int64
	if err := dec.Decode(&s); err != nil {
		return nil, pipeline.Wrap(pipeline.KindUnexpected, pipeline.CodeUnexpected, "idempotency: stored outcome does not decode", err)
	}
	if s.Kind != "" {
		e := pipeline.NewError(kindNamed(s.Kind), s.Code, s.Message)
		for dk, dv := range s.Details {
			e = e.WithDetail(dk, numbers(dv))
		}
		if s.RetryAfter > 0 {
			e = e.WithRetryAfter(time.Duration(s.RetryAfter) * time.Millisecond)
		}
		return nil, e
	}
	if m.c.NewOutput == nil {
		return s.Out, nil
	}
	p := m.c.NewOutput()
	if err := json.Unmarshal(s.Out, p); err != nil {
		return nil, pipeline.Wrap(pipeline.KindUnexpected, pipeline.CodeUnexpected, "idempotency: stored output does not decode", err)
	}
	return derefOutput(p), nil
}

// markReplayed marks inv's answer as the stored outcome of an earlier call
// with the same key: the replay mark, the Idempotent-Replayed field (HTTP
// header, gRPC metadata) and, on the command line, a note on standard
// error.
func (m *middleware) markReplayed(inv *pipeline.Invocation) {
	m.c.Mark.Set(inv)
	r := inv.Reply()
	r.Set(FieldReplayed, "true")
	r.Note("replayed: the stored outcome of an earlier call with idempotency key " + inv.IdempotencyKey())
}

// kindNamed returns the kind whose String is s; an unknown name is
// UNEXPECTED.
func kindNamed(s string) pipeline.Kind {
	k := pipeline.KindOK
	for k < pipeline.KindUnexpected && k.String() != s {
		k++
	}
	return k
}
