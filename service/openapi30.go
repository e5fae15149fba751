package service

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/danielgtaylor/huma/v2/yaml"
)

// The OpenAPI documents of the API, served beside it:
//
//	/openapi.json, /openapi.yaml          OpenAPI 3.1, as huma generates it
//	/openapi-3.0.json, /openapi-3.0.yaml  OpenAPI 3.0.3, for the tools that read no 3.1
//
// The 3.0 document is huma's downgrade of the 3.1 one, made valid against
// the OpenAPI 3.0 schema: every schema keyword 3.0 lacks is rewritten
// (const as a one-value enum) or kept as an x- extension
// (patternDescription as x-pattern-description).
const (
	openAPIPath   = "/openapi.json"
	openAPI30Path = "/openapi-3.0.json"
)

// registerDocuments serves the OpenAPI documents, each made once, on its
// first request, when every operation has been registered.
func (s *Service) registerDocuments() {
	type doc struct {
		path, contentType string
		make              func() ([]byte, error)
		once              sync.Once
		body              []byte
		err               error
	}
	json31 := func() ([]byte, error) { return json.Marshal(s.api.OpenAPI()) }
	yamlOf := func(f func() ([]byte, error)) func() ([]byte, error) {
		return func() ([]byte, error) {
			b, err := f()
			if err != nil {
				return nil, err
			}
			var out bytes.Buffer
			err = yaml.Convert(&out, bytes.NewReader(b))
			return out.Bytes(), err
		}
	}
	json30 := func() ([]byte, error) { return s.openAPI30() }
	for _, d := range []*doc{
		{path: openAPIPath, contentType: "application/openapi+json", make: json31},
		{path: "/openapi.yaml", contentType: "application/openapi+yaml", make: yamlOf(json31)},
		{path: openAPI30Path, contentType: "application/openapi+json", make: json30},
		{path: "/openapi-3.0.yaml", contentType: "application/openapi+yaml", make: yamlOf(json30)},
	} {
		s.mux.HandleFunc("GET "+d.path, func(w http.ResponseWriter, r *http.Request) {
			d.once.Do(func() { d.body, d.err = d.make() })
			if d.err != nil {
				http.Error(w, "the OpenAPI document: "+d.err.Error(), http.StatusInternalServerError)
				return
			}
			w.Header().Set("Content-Type", d.contentType)
			w.Write(d.body)
		})
	}
}

// openAPI30 returns the API's OpenAPI 3.0.3 document.
func (s *Service) openAPI30() ([]byte, error) {
	b, err := s.api.OpenAPI().Downgrade()
	if err != nil {
		return nil, fmt.Errorf("OpenAPI 3.0 document: %w", err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("OpenAPI 3.0 document: %w", err)
	}
	downgradeSchemas(doc)
	return json.Marshal(doc)
}

// schemaKeywords30 are the keywords of an OpenAPI 3.0 Schema Object.
var schemaKeywords30 = map[string]bool{
	"title": true, "multipleOf": true, "maximum": true, "exclusiveMaximum": true, "minimum": true,
	"exclusiveMinimum": true, "maxLength": true, "minLength": true, "pattern": true, "maxItems": true,
	"minItems": true, "uniqueItems": true, "maxProperties": true, "minProperties": true, "required": true,
	"enum": true, "type": true, "not": true, "allOf": true, "oneOf": true, "anyOf": true, "items": true,
	"properties": true, "additionalProperties": true, "description": true, "format": true, "default": true,
	"nullable": true, "discriminator": true, "readOnly": true, "writeOnly": true, "example": true,
	"externalDocs": true, "deprecated": true, "xml": true, "$ref": true,
}

// downgradeSchemas finds every schema in a document (under a "schema" key
// and in components.schemas) and makes it a 3.0 schema.
func downgradeSchemas(v any) {
	switch x := v.(type) {
	case map[string]any:
		for k, sub := range x {
			switch {
			case k == "schema":
				schema30(sub)
			case k == "schemas":
				if m, ok := sub.(map[string]any); ok {
					for _, s := range m {
						schema30(s)
					}
				}
			default:
				downgradeSchemas(sub)
			}
		}
	case []any:
		for _, sub := range x {
			downgradeSchemas(sub)
		}
	}
}

// schema30 rewrites a schema and those in it for OpenAPI 3.0: const
// becomes a one-value enum, patternDescription x-pattern-description, any
// other keyword 3.0 lacks an x- extension of its name.
func schema30(v any) {
	s, ok := v.(map[string]any)
	if !ok {
		return
	}
	for k, sub := range s {
		switch {
		case strings.HasPrefix(k, "x-"):
		case k == "const":
			delete(s, k)
			if _, ok := s["enum"]; !ok {
				s["enum"] = []any{sub}
			}
		case k == "patternDescription":
			delete(s, k)
			s["x-pattern-description"] = sub
		case !schemaKeywords30[k]:
			delete(s, k)
			s["x-"+k] = sub
		case k == "properties":
			if m, ok := sub.(map[string]any); ok {
				for _, p := range m {
					schema30(p)
				}
			}
		case k == "items", k == "not", k == "additionalProperties":
			schema30(sub)
		case k == "allOf", k == "oneOf", k == "anyOf":
			if list, ok := sub.([]any); ok {
				for _, p := range list {
					schema30(p)
				}
			}
		}
	}
}
