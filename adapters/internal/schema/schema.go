// Package schema makes the JSON Schemas of operations from their Go
// types. The OpenAPI document and the MCP tools share them. So both say
// the same constraints.
package schema

import (
	"reflect"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3gen"

	"github.com/sundial-go/sundial/operations"
)

// Builder makes schemas with encoding/json's field names, by kin-openapi's
// openapi3gen. Component schemas it refers to go into Components.
type Builder struct {
	// Components receives the component schemas the schemas refer to.
	Components   openapi3.Schemas
	strict, open *openapi3gen.Generator
}

// NewBuilder returns a builder that adds component schemas to components.
func NewBuilder(components openapi3.Schemas) *Builder {
	return &Builder{Components: components, strict: newGenerator(true), open: newGenerator(false)}
}

// Input returns the schema of d's input, with the constraints of its
// validate tags. An input whose policy rejects unknown fields says so.
// Every object of it has additionalProperties false. A validator then
// answers as the server does.
func (b *Builder) Input(d *operations.Descriptor) (*openapi3.SchemaRef, error) {
	gen := b.strict
	if d.InputPolicy.AllowUnknownFields {
		gen = b.open
	}
	s, err := b.of(gen, d.Input)
	if err != nil {
		return nil, err
	}
	return constrain(d, d.Input, s), nil
}

// Output returns the schema of Go type t, open to other properties.
func (b *Builder) Output(t reflect.Type) (*openapi3.SchemaRef, error) {
	return b.of(b.open, t)
}

// of returns the schema of Go type t, made by gen.
func (b *Builder) of(gen *openapi3gen.Generator, t reflect.Type) (*openapi3.SchemaRef, error) {
	return gen.NewSchemaRefForValue(reflect.New(t).Elem().Interface(), b.Components)
}

// newGenerator returns a generator of inline JSON schemas with
// encoding/json's field names; closed objects forbid other properties.
func newGenerator(closed bool) *openapi3gen.Generator {
	opts := []openapi3gen.Option{openapi3gen.UseAllExportedFields()}
	if closed {
		no := false
		opts = append(opts, openapi3gen.SchemaCustomizer(func(_ string, t reflect.Type, _ reflect.StructTag, s *openapi3.Schema) error {
			for t.Kind() == reflect.Pointer {
				t = t.Elem()
			}
			if t.Kind() == reflect.Struct && s.Type.Is(openapi3.TypeObject) {
				s.AdditionalProperties = openapi3.AdditionalProperties{Has: &no}
			}
			return nil
		}))
	}
	return openapi3gen.NewGenerator(opts...)
}
