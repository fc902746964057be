package httpadapter

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/labstack/echo/v4"

	"github.com/sundial-go/sundial/adapters/internal/schema"
	"github.com/sundial-go/sundial/operations"
)

// OpenAPIInfo is what the application says of its OpenAPI document: the
// info object, where it is served, how callers authenticate, and a hook.
type OpenAPIInfo struct {
	Title       string
	Version     string
	Description string
	// License and Contact go into the info object when not nil.
	License *openapi3.License
	Contact *openapi3.Contact
	// Servers are the document's servers, e.g. {URL: "https://api.example.com"}.
	// Without any, tools assume the host that served the document.
	Servers openapi3.Servers
	// SecuritySchemes are the document's components.securitySchemes, and
	// Security its top-level security requirements, which apply to every
	// operation: e.g. a "bearer" http scheme and [{"bearer": []}]. The
	// adapter does not authenticate: a middleware of the application does.
	SecuritySchemes openapi3.SecuritySchemes
	Security        openapi3.SecurityRequirements
	// Operation, if not nil, is called for each operation after the
	// adapter has described it, to add what the adapter does not know of
	// (e.g. the answers of an idempotency layer, 409/422). The document
	// is validated after it.
	Operation func(d *operations.Descriptor, op *openapi3.Operation)
}

// problemSchemaName is the component schema of RFC 9457 Problem Details
// in the OpenAPI document.
const problemSchemaName = "Problem"

// OpenAPI returns the OpenAPI 3.1 document of the operations the adapter
// mounted. It has one path item per route; echo's ":id" becomes "{id}".
// Each lists the path and query parameters the binder fills. It lists the
// deadline headers the adapter reads: Sundial-Deadline and the relative
// header. The JSON request body and success response are built from the Go
// types, by kin-openapi's openapi3gen with encoding/json names. The Problem
// Details answers are those the operation's effective policy can produce.
// 400 and 500 are always there, and 413 with a body. 504 and 408 are too,
// as every call may carry a deadline; the operation's own TimeoutSeconds
// is named when it has one. 503 with Retry-After appears when it has
// limits: rate, concurrency or a breaker. The document is validated
// (openapi3.T.Validate) before it is returned.
func (a *Adapter) OpenAPI(info OpenAPIInfo) (*openapi3.T, error) {
	b := newOpenAPIBuilder(info)
	for _, rt := range a.routes {
		op, err := a.describeOperation(b, rt)
		if err != nil {
			return nil, err
		}
		if info.Operation != nil {
			info.Operation(rt.desc, op)
		}
		b.doc.AddOperation(openAPIPath(rt.desc.Path), rt.desc.Method, op)
	}
	if err := openapi3.NewLoader().ResolveRefsIn(b.doc, nil); err != nil {
		return nil, fmt.Errorf("httpadapter: OpenAPI: %w", err)
	}
	if err := b.doc.Validate(context.Background()); err != nil {
		return nil, fmt.Errorf("httpadapter: OpenAPI: the document does not validate: %w", err)
	}
	if err := checkSecurity(b.doc); err != nil {
		return nil, err
	}
	return b.doc, nil
}

// checkSecurity reports a security requirement, top-level or of an
// operation, that names no security scheme of the document (kin-openapi's
// Validate does not).
func checkSecurity(doc *openapi3.T) error {
	reqs := slices.Clone(doc.Security)
	for _, item := range doc.Paths.Map() {
		for _, op := range item.Operations() {
			if op.Security != nil {
				reqs = append(reqs, *op.Security...)
			}
		}
	}
	for _, req := range reqs {
		for name := range req {
			if ref := doc.Components.SecuritySchemes[name]; ref == nil || ref.Value == nil {
				return fmt.Errorf("httpadapter: OpenAPI: security requirement %q names no security scheme; add it to OpenAPIInfo.SecuritySchemes", name)
			}
		}
	}
	return nil
}

// openAPIBuilder holds the document being built and the builder of its
// schemas (schema.Builder), whose components are the document's.
type openAPIBuilder struct {
	doc     *openapi3.T
	schemas *schema.Builder
}

// newOpenAPIBuilder returns a builder of the document described by info,
// with the Problem schema and the Retry-After header as components.
func newOpenAPIBuilder(info OpenAPIInfo) *openAPIBuilder {
	if info.Title == "" {
		info.Title = "Sundial operations"
	}
	if info.Version == "" {
		info.Version = "0"
	}
	doc := &openapi3.T{
		OpenAPI: "3.1.0",
		Info: &openapi3.Info{Title: info.Title, Version: info.Version, Description: info.Description,
			License: info.License, Contact: info.Contact},
		Servers:  slices.Clone(info.Servers),
		Security: slices.Clone(info.Security),
		Paths:    openapi3.NewPaths(),
		Components: &openapi3.Components{Schemas: openapi3.Schemas{}, Headers: openapi3.Headers{},
			SecuritySchemes: maps.Clone(info.SecuritySchemes)},
	}
	doc.Components.Schemas[problemSchemaName] = problemSchema()
	doc.Components.Headers["Retry-After"] = &openapi3.HeaderRef{Value: &openapi3.Header{Parameter: openapi3.Parameter{
		Description: "Seconds to wait before retrying (RFC 9110 §10.2.3).",
		Schema:      openapi3.NewIntegerSchema().WithMin(0).NewRef(),
	}}}
	return &openAPIBuilder{doc: doc, schemas: schema.NewBuilder(doc.Components.Schemas)}
}

// describeOperation returns the operation object of one route: its
// parameters, request body, success response and problem answers.
func (a *Adapter) describeOperation(b *openAPIBuilder, rt *route) (*openapi3.Operation, error) {
	d := rt.desc
	op := &openapi3.Operation{OperationID: d.ID, Summary: d.Summary, Responses: openapi3.NewResponses()}
	op.Responses.Delete("default")
	if err := a.describeParams(op, rt); err != nil {
		return nil, fmt.Errorf("httpadapter: OpenAPI: operation %q: %w", d.ID, err)
	}
	hasBody := d.Method != http.MethodGet && d.Method != http.MethodHead && d.Method != http.MethodDelete &&
		d.Input != nil && d.Input.Kind() == reflect.Struct && d.Input.NumField() > 0
	if hasBody {
		s, err := b.schemas.Input(d)
		if err != nil {
			return nil, fmt.Errorf("httpadapter: OpenAPI: operation %q input: %w", d.ID, err)
		}
		op.RequestBody = &openapi3.RequestBodyRef{Value: openapi3.NewRequestBody().WithJSONSchemaRef(s)}
	}
	if err := b.describeSuccess(op, rt); err != nil {
		return nil, err
	}
	a.describeProblems(op, rt, hasBody)
	return op, nil
}

// describeSuccess adds the success response of rt to op.
func (b *openAPIBuilder) describeSuccess(op *openapi3.Operation, rt *route) error {
	if rt.success == http.StatusNoContent {
		op.AddResponse(rt.success, openapi3.NewResponse().WithDescription("Success, no content."))
		return nil
	}
	s, err := b.schemas.Output(rt.desc.Output)
	if err != nil {
		return fmt.Errorf("httpadapter: OpenAPI: operation %q output: %w", rt.desc.ID, err)
	}
	op.AddResponse(rt.success, openapi3.NewResponse().WithDescription("Success.").WithJSONSchemaRef(s))
	return nil
}

// describeProblems adds to op the Problem Details answers the effective
// policy of rt's operation can produce, and the default answer.
func (a *Adapter) describeProblems(op *openapi3.Operation, rt *route, hasBody bool) {
	pol := rt.op.Policy()
	problem(op, http.StatusBadRequest, badInput+" or a deadline header is malformed.")
	if hasBody {
		problem(op, http.StatusRequestEntityTooLarge, "VALIDATION: the body is over the limit.")
	}
	timeout := "TIMEOUT: the caller's deadline (Sundial-Deadline or the relative header) passed."
	if pol.Timeout > 0 {
		timeout = fmt.Sprintf("TIMEOUT: the operation's deadline (%s) or the caller's passed.", pol.Timeout)
	}
	problem(op, http.StatusGatewayTimeout, timeout)
	problem(op, http.StatusRequestTimeout, "CANCELLED: the caller went away or the server is shutting down.")
	if pol.Limited() && !pol.Shadow { // a shadow rejects nothing
		var what []string
		if pol.PermitLimit > 0 {
			what = append(what, fmt.Sprintf("rate limited (%d per %s)", pol.PermitLimit, pol.Window))
		}
		if k := pol.PerKey; k.PermitLimit > 0 {
			what = append(what, fmt.Sprintf("rate limited per key (%d per %s each)", k.PermitLimit, k.Window))
		}
		switch {
		case pol.ConcurrencyLimit > 0:
			what = append(what, fmt.Sprintf("concurrency limited (%d)", pol.ConcurrencyLimit))
		case pol.ConcurrencyLimit < 0:
			what = append(what, "concurrency limited (adaptive)")
		}
		if pol.FailureThreshold > 0 {
			what = append(what, "circuit open")
		}
		if len(what) > 0 { // a shadow controller alone rejects nothing
			describeLimits(op, what)
		}
	}
	if ip, _ := rt.op.Idempotency(); ip.Enabled {
		describeIdempotency(op, ip.Required, rt.success)
	}
	problem(op, http.StatusInternalServerError, "UNEXPECTED: the handler failed unexpectedly.")
	op.Responses.Set("default", &openapi3.ResponseRef{Value: problemResponse("Any other outcome of the operation (e.g. NOT_FOUND, CONFLICT), as Problem Details.")})
}

// badInput begins the description of the 400 answer.
const badInput = "VALIDATION: the input does not fit (unknown field, wrong type, failed Validate), " +
	"breaks the constraints of its schema (KERNEL_VALIDATION_007: details.errors lists every failing field)"

// describeLimits adds the 503 answer of an operation with limits (rate,
// concurrency or a breaker), naming them (what), with Retry-After.
func describeLimits(op *openapi3.Operation, what []string) {
	problem(op, http.StatusServiceUnavailable, "UNAVAILABLE: "+strings.Join(what, ", ")+"; Retry-After says when to retry.")
	op.Responses.Status(http.StatusServiceUnavailable).Value.Headers = openapi3.Headers{
		"Retry-After": &openapi3.HeaderRef{Ref: "#/components/headers/Retry-After"},
	}
}

// describeIdempotency adds the answers of idempotency keys
// (docs/idempotency.md) to op: 409, 422, the key's 400s (a missing key
// too when keys are required), and the Idempotent-Replayed header of the
// success response.
func describeIdempotency(op *openapi3.Operation, required bool, success int) {
	problem(op, http.StatusConflict, "CONFLICT: a call with this Idempotency-Key is still running (KERNEL_CONFLICT_001; Retry-After says when to retry), or it ran and its outcome is too large to replay (KERNEL_CONFLICT_002).")
	op.Responses.Status(http.StatusConflict).Value.Headers = openapi3.Headers{
		"Retry-After": &openapi3.HeaderRef{Ref: "#/components/headers/Retry-After"},
	}
	problem(op, http.StatusUnprocessableEntity, "UNPROCESSABLE: this Idempotency-Key was used with a different input (KERNEL_UNPROCESSABLE_001).")
	desc := badInput + ", a deadline header or the Idempotency-Key is malformed (KERNEL_VALIDATION_005)."
	if required {
		desc += " Also when the Idempotency-Key is missing (KERNEL_VALIDATION_004)."
		if p := op.Parameters.GetByInAndName("header", "Idempotency-Key"); p != nil {
			p.Required = true
		}
	}
	problem(op, http.StatusBadRequest, desc)
	if ok := op.Responses.Status(success); ok != nil && ok.Value != nil {
		ok.Value.Headers = openapi3.Headers{"Idempotent-Replayed": &openapi3.HeaderRef{Value: &openapi3.Header{Parameter: openapi3.Parameter{
			Description: "\"true\" when the answer is the stored outcome of an earlier call with the same Idempotency-Key.",
			Schema:      openapi3.NewStringSchema().WithEnum("true").NewRef(),
		}}}}
	}
}

// OpenAPIHandler returns a handler that serves the OpenAPI document
// (OpenAPI) as application/json, built once, when OpenAPIHandler is
// called; mount it where you like, e.g. e.GET("/openapi.json", h).
func (a *Adapter) OpenAPIHandler(info OpenAPIInfo) (echo.HandlerFunc, error) {
	doc, err := a.OpenAPI(info)
	if err != nil {
		return nil, err
	}
	body, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("httpadapter: OpenAPI: %w", err)
	}
	return func(c echo.Context) error {
		return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, body)
	}, nil
}

// describeParams adds the path and query parameters of rt and the
// deadline headers.
func (a *Adapter) describeParams(op *openapi3.Operation, rt *route) error {
	t := rt.desc.Input
	for _, p := range rt.binder.params {
		f := t.FieldByIndex(p.index)
		s, err := paramSchema(f.Type)
		if err != nil {
			return fmt.Errorf("path parameter %q: %w", p.param, err)
		}
		schema.ConstrainParam(rt.desc, f, s)
		op.AddParameter(openapi3.NewPathParameter(p.param).WithSchema(s))
	}
	names := make([]string, 0, len(rt.binder.query))
	for n := range rt.binder.query {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		f := t.FieldByIndex(rt.binder.query[n].index)
		s, err := paramSchema(f.Type)
		if err != nil {
			return fmt.Errorf("query parameter %q: %w", n, err)
		}
		// The binder leaves out the fields path parameters fill.
		qp := openapi3.NewQueryParameter(n).WithSchema(s)
		qp.Required = schema.ConstrainParam(rt.desc, f, s)
		op.AddParameter(qp)
	}
	op.AddParameter(openapi3.NewHeaderParameter(HeaderDeadline).
		WithDescription("The caller's absolute deadline, RFC 3339 (e.g. 2026-12-03T08:00:00.250Z).").
		WithSchema(openapi3.NewDateTimeSchema()))
	op.AddParameter(openapi3.NewHeaderParameter(HeaderPriority).
		WithDescription(fmt.Sprintf("The class of this call; it can only lower the operation's class (%s). "+
			"A value naming no class is a 400 KERNEL_VALIDATION_009.", rt.op.Policy().Priority)).
		WithSchema(openapi3.NewStringSchema().WithEnum("critical", "default", "sheddable")))
	idem, _ := rt.op.Idempotency()
	op.AddParameter(openapi3.NewHeaderParameter("Idempotency-Key").
		WithDescription(idempotencyKeyDescription(idem.Enabled)).
		WithSchema(idempotencyKeySchema()))
	if a.cfg.relHeader != "" {
		op.AddParameter(openapi3.NewHeaderParameter(a.cfg.relHeader).
			WithDescription("The caller's deadline as milliseconds remaining.").
			WithSchema(openapi3.NewIntegerSchema().WithMin(0)))
	}
	return nil
}

// idempotencyKeyDescription describes the Idempotency-Key header of an
// operation that takes keys (enabled) or does not.
func idempotencyKeyDescription(enabled bool) string {
	d := fmt.Sprintf("The caller's idempotency key, as a structured-field string (RFC 9651 sf-string, "+
		"draft-ietf-httpapi-idempotency-key-header): in double quotes, with \\\" and \\\\ escapes, "+
		"e.g. \"8e03978e-40d5-43e8\"; the key itself is 1 to %d printable ASCII characters. ", maxIdempotencyKey)
	if enabled {
		return d + "A malformed one (unquoted, empty, longer, repeated) is a 400 KERNEL_VALIDATION_005 and nothing runs."
	}
	return d + "This operation does not take keys: a well-formed one is passed on to the calls it makes (baggage), " +
		"a malformed one is ignored."
}

// idempotencyKeySchema is the schema of the Idempotency-Key header's raw
// value, the quoted sf-string. Its bounds are the raw value's, not the
// key's. A key of 1 character is 3 quoted, and one of 255 is 257 quoted.
// It is 2*255+2 = 512 when every character is escaped (\" or \\). That is
// the longest value that can hold a valid key. It is the bound the adapter
// checks before parsing (idempotencyKey). The pattern is the sf-string
// grammar over printable ASCII. maxLength cannot say the 255-character
// bound on the unescaped key, so the description does.
func idempotencyKeySchema() *openapi3.Schema {
	s := openapi3.NewStringSchema()
	s.MinLength = 3
	s.MaxLength = new(uint64(2*maxIdempotencyKey + 2))
	s.Pattern = idempotencyKeyPattern
	return s
}

// idempotencyKeyPattern is the sf-string grammar (RFC 9651 3.3.3) over
// printable ASCII, in a syntax that ECMA-262 and Go's regexp share.
const idempotencyKeyPattern = `^"([ !#-\[\]-~]|\\["\\])+"$`

// paramSchema is the schema of a path or query parameter's field.
func paramSchema(t reflect.Type) (*openapi3.Schema, error) {
	if reflect.PointerTo(t).Implements(textUnmarshalerType) {
		return openapi3.NewStringSchema(), nil
	}
	switch t.Kind() {
	case reflect.Pointer:
		return paramSchema(t.Elem())
	case reflect.Slice:
		s, err := paramSchema(t.Elem())
		if err != nil {
			return nil, err
		}
		return openapi3.NewArraySchema().WithItems(s), nil
	case reflect.String:
		return openapi3.NewStringSchema(), nil
	case reflect.Bool:
		return openapi3.NewBoolSchema(), nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return openapi3.NewIntegerSchema(), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return openapi3.NewIntegerSchema().WithMin(0), nil
	case reflect.Float32, reflect.Float64:
		return openapi3.NewFloat64Schema(), nil
	}
	return nil, fmt.Errorf("type %v has no parameter form", t)
}

// problem adds a Problem Details response.
func problem(op *openapi3.Operation, status int, desc string) {
	op.Responses.Set(strconv.Itoa(status), &openapi3.ResponseRef{Value: problemResponse(desc)})
}

func problemResponse(desc string) *openapi3.Response {
	r := openapi3.NewResponse().WithDescription(desc)
	r.Content = openapi3.Content{ContentTypeProblem: openapi3.NewMediaType().
		WithSchemaRef(openapi3.NewSchemaRef("#/components/schemas/"+problemSchemaName, nil))}
	return r
}

// problemSchema is the schema of Problem (RFC 9457 members and Sundial's).
func problemSchema() *openapi3.SchemaRef {
	s := openapi3.NewObjectSchema().
		WithProperty("type", openapi3.NewStringSchema()).
		WithProperty("title", openapi3.NewStringSchema()).
		WithProperty("status", openapi3.NewIntegerSchema()).
		WithProperty("detail", openapi3.NewStringSchema()).
		WithProperty("instance", openapi3.NewStringSchema()).
		WithProperty("code", openapi3.NewStringSchema()).
		WithProperty("traceId", openapi3.NewStringSchema()).
		WithProperty("details", openapi3.NewObjectSchema().
			WithProperty(operations.DetailViolations, violationsSchema()))
	s.Required = []string{"type", "title", "status", "detail", "instance", "code", "traceId", "details"}
	s.Description = "RFC 9457 Problem Details with the outcome's stable code, trace ID and details."
	return s.NewRef()
}

// violationsSchema is the schema of details.errors, the failing fields of
// a KERNEL_VALIDATION_007 outcome: operations.Violation's JSON.
func violationsSchema() *openapi3.Schema {
	v := openapi3.NewObjectSchema().
		WithProperty("field", openapi3.NewStringSchema()).
		WithProperty("rule", openapi3.NewStringSchema()).
		WithProperty("param", openapi3.NewStringSchema()).
		WithProperty("message", openapi3.NewStringSchema())
	v.Required = []string{"field", "rule", "message"}
	v.Properties["field"].Value.Description = "The field's JSON pointer (RFC 6901), e.g. /lines/0/sku."
	v.Properties["rule"].Value.Description = "The validate rule it breaks, e.g. max."
	v.Properties["param"].Value.Description = "The rule's parameter, e.g. 10000; absent when it has none."
	return openapi3.NewArraySchema().WithItems(v)
}

// openAPIPath turns echo's "/orders/:id" into "/orders/{id}" (and a
// trailing "*" into "{*}").
func openAPIPath(p string) string {
	segs := strings.Split(p, "/")
	for i, s := range segs {
		switch {
		case strings.HasPrefix(s, ":") && len(s) > 1:
			segs[i] = "{" + s[1:] + "}"
		case s == "*":
			segs[i] = "{*}"
		}
	}
	return strings.Join(segs, "/")
}
