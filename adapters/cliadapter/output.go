package cliadapter

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/sundial-go/sundial/adapters/internal/outcome"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
)

// Output formats of --output.
const (
	outputJSON = "json"
	outputText = "text"
)

// outputValue is the pflag.Value of --output. Its zero value is JSON.
type outputValue struct{ format string }

func (v *outputValue) Set(s string) error {
	switch s {
	case outputJSON, outputText:
		v.format = s
		return nil
	}
	return fmt.Errorf("cliadapter: output format %q is not %q or %q", s, outputJSON, outputText)
}

func (v *outputValue) Type() string { return "format" }

func (v *outputValue) String() string { return v.get() }

func (v *outputValue) get() string {
	if v.format == "" {
		return outputJSON
	}
	return v.format
}

// writeResult writes an operation's output as indented JSON. With
// outputText, a JSON object is one "name  value" line per top-level field.
// Strings are unquoted, other values compact JSON. A JSON string is its
// text on one line, and any other value its JSON. An output that does not
// encode is an error, and nothing is written. A MarshalJSON that panics is
// such an output.
func writeResult(w io.Writer, format string, out any) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("cliadapter: encoding a %T panicked: %v", out, v)
		}
	}()
	b, err := json.Marshal(out)
	if err != nil {
		return err
	}
	if format != outputText {
		var buf bytes.Buffer
		if err := json.Indent(&buf, b, "", "  "); err != nil {
			return err
		}
		buf.WriteByte('\n')
		_, err = w.Write(buf.Bytes())
		return err
	}
	if len(b) == 0 || b[0] != '{' {
		_, err = fmt.Fprintln(w, textOf(b))
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if _, err := dec.Token(); err != nil { // '{'
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return err
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return err
		}
		fmt.Fprintf(tw, "%s\t%s\n", key, textOf(raw))
	}
	return tw.Flush()
}

// textOf renders one JSON value for outputText: a string's text (with
// newlines and tabs escaped so each value stays on its line), anything else
// as compact JSON.
func textOf(raw []byte) string {
	var s string
	if len(raw) > 0 && raw[0] == '"' && json.Unmarshal(raw, &s) == nil {
		return strings.NewReplacer("\n", `\n`, "\t", `\t`, "\r", `\r`).Replace(s)
	}
	var buf bytes.Buffer
	if json.Compact(&buf, raw) != nil {
		return string(raw)
	}
	return buf.String()
}

// Codes of the failures the adapter itself produces, before the pipeline
// runs. The kernel's codes (pipeline.Code*) and the application's cover
// the rest.
const (
	// codeMalformedInput: the --input document is not one JSON value
	// (a syntax error, trailing data, empty, too large or unreadable).
	codeMalformedInput = "CLI_VALIDATION_001"
	// codeWrongInput: the --input document is JSON but does not fit the
	// operation's input (a value of the wrong type; an unknown field is the
	// input policy's operations.CodeUnknownField, see operations.InputPolicy).
	codeWrongInput = "CLI_VALIDATION_002"
	// codeUsage: a flag of an operation command is unknown or malformed, or
	// the command was given a positional argument. It is the code the
	// kernel observes for such a call; the command reports a usage error
	// (exit code 2) without Problem Details.
	codeUsage = "CLI_VALIDATION_003"
)

// Problem is the RFC 9457 Problem Details document an operation command
// writes to stderr when its invocation fails. It carries the same type,
// title, detail, code, trace ID and details as the HTTP adapter's body;
// instead of an HTTP status it has the process exit code, and the operation
// ID instead of a request path.
type Problem struct {
	// Type is "urn:sundial:error:" + Code.
	Type string `json:"type"`
	// Title is the outcome kind, e.g. "TIMEOUT".
	Title string `json:"title"`
	// Detail is the human message (never internal text for UNEXPECTED).
	Detail string `json:"detail"`
	// Code is the stable error code, e.g. "KERNEL_TIMEOUT_001".
	Code string `json:"code"`
	// Operation is the operation ID.
	Operation string `json:"operation"`
	// ExitCode is the process exit code, ExitCodeFor the kind.
	ExitCode int `json:"exitCode"`
	// TraceID is the trace ID of the invocation (its span's when a tracer
	// is installed), or "".
	TraceID string `json:"traceId"`
	// Details are the outcome's details, e.g. {"field": "amount"}, and its
	// retry-after in whole seconds under "retryAfter"; an empty object when
	// there are none, and always for UNEXPECTED. A constraint outcome's
	// failing fields are under "errors", named by their flags.
	Details map[string]any `json:"details"`
}

// newProblem returns the Problem Details of a failure of the operation id
// whose trace ID is traceID. An UNEXPECTED outcome, a nil e included,
// shows only pipeline.UnexpectedMessage and no details.
func newProblem(id string, e *pipeline.Error, traceID string) Problem {
	kind := e.Kind()
	details := outcome.Details(e)
	if details == nil {
		details = map[string]any{}
	}
	return Problem{
		Type:      outcome.TypePrefix + e.Code(),
		Title:     kind.String(),
		Detail:    outcome.SafeMessage(e),
		Code:      e.Code(),
		Operation: id,
		ExitCode:  ExitCodeFor(kind),
		TraceID:   traceID,
		Details:   details,
	}
}

// writeProblem writes a failure to stderr. It writes the Problem Details
// JSON, except with outputText. Then comes one human line, "<command
// path>: <TITLE> <code>: <detail>". With outputText, "  key: value" lines
// of the details follow. A trace ID adds a "  traceId: ..." line.
func writeProblem(w io.Writer, format, path, id string, e *pipeline.Error, traceID string) {
	p := newProblem(id, e, traceID)
	var b strings.Builder
	if format != outputText {
		j, err := json.Marshal(p)
		if err != nil { // details that do not encode: drop them, keep the rest
			p.Details = map[string]any{}
			j, _ = json.Marshal(p)
		}
		b.Write(j)
		b.WriteByte('\n')
	}
	fmt.Fprintf(&b, "%s: %s %s: %s\n", path, p.Title, p.Code, p.Detail)
	if format == outputText {
		vs, _ := p.Details[operations.DetailViolations].([]operations.Violation)
		for _, v := range vs { // one line per failing flag
			fmt.Fprintf(&b, "  %s: %s (%s)\n", v.Field, strings.TrimSuffix(v.Message, "."), v.Rule)
		}
		for _, k := range slices.Sorted(maps.Keys(p.Details)) {
			if vs != nil && k == operations.DetailViolations {
				continue
			}
			v, _ := json.Marshal(p.Details[k])
			fmt.Fprintf(&b, "  %s: %s\n", k, textOf(v))
		}
		if p.TraceID != "" {
			fmt.Fprintf(&b, "  traceId: %s\n", p.TraceID)
		}
	}
	writeStr(w, b.String())
}
