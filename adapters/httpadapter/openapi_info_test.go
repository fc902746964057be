package httpadapter_test

import (
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/sundial-go/sundial/adapters/httpadapter"
	"github.com/sundial-go/sundial/operations"
)

// TestOpenAPIServersLicenseSecurity: the application fills the document's
// servers, license, contact, security schemes and top-level security
// through OpenAPIInfo, and the served document has them; a security
// requirement, top-level or set by the Operation hook, that names no
// scheme is an error.
func TestOpenAPIServersLicenseSecurity(t *testing.T) {
	bearer := openapi3.NewJWTSecurityScheme()
	info := httpadapter.OpenAPIInfo{Title: "test", Version: "1",
		License: &openapi3.License{Name: "Apache 2.0", URL: "https://www.apache.org/licenses/LICENSE-2.0"},
		Contact: &openapi3.Contact{Name: "Team", Email: "team@example.com"},
		Servers: openapi3.Servers{{URL: "https://api.example.com", Description: "production"}},
		SecuritySchemes: openapi3.SecuritySchemes{
			"bearer": &openapi3.SecuritySchemeRef{Value: bearer},
		},
		Security: openapi3.SecurityRequirements{{"bearer": []string{}}},
	}
	_, doc := serveOpenAPI(t, newTestApp(), serverOpts{}, info)
	if err := doc.Validate(t.Context()); err != nil {
		t.Fatal(err)
	}
	if l := doc.Info.License; l == nil || l.Name != "Apache 2.0" || l.URL != info.License.URL {
		t.Errorf("info.license = %+v, want %+v", l, info.License)
	}
	if c := doc.Info.Contact; c == nil || c.Email != "team@example.com" {
		t.Errorf("info.contact = %+v, want %+v", c, info.Contact)
	}
	if len(doc.Servers) != 1 || doc.Servers[0].URL != "https://api.example.com" {
		t.Errorf("servers = %+v, want https://api.example.com", doc.Servers)
	}
	if len(doc.Security) != 1 || doc.Security[0]["bearer"] == nil {
		t.Errorf("security = %+v, want [{bearer: []}]", doc.Security)
	}
	if s := doc.Components.SecuritySchemes["bearer"]; s == nil || s.Value.Scheme != "bearer" || s.Value.Type != "http" {
		t.Errorf("components.securitySchemes.bearer = %+v, want an http bearer scheme", s)
	}

	s := startServer(t, newTestApp(), serverOpts{})
	undefined := info
	undefined.Security = openapi3.SecurityRequirements{{"apiKey": []string{}}}
	if _, err := s.adapter.OpenAPI(undefined); err == nil || !strings.Contains(err.Error(), `"apiKey"`) {
		t.Errorf("OpenAPI(security naming apiKey, no such scheme) = %v, want an error naming it", err)
	}
	hooked := info
	hooked.Operation = func(_ *operations.Descriptor, op *openapi3.Operation) {
		op.Security = &openapi3.SecurityRequirements{{"oauth": []string{"write"}}}
	}
	if _, err := s.adapter.OpenAPI(hooked); err == nil || !strings.Contains(err.Error(), `"oauth"`) {
		t.Errorf("OpenAPI(an operation's security naming oauth) = %v, want an error naming it", err)
	}
	plain, err := s.adapter.OpenAPI(httpadapter.OpenAPIInfo{})
	if err != nil {
		t.Fatal(err)
	}
	if plain.Servers != nil || plain.Security != nil || plain.Info.License != nil {
		t.Errorf("the document of an empty OpenAPIInfo has servers %v, security %v, license %v; want none", plain.Servers, plain.Security, plain.Info.License)
	}
}
