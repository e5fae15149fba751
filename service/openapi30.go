package service

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/danielgtaylor/huma/v2/yaml"
)

// The OpenAPI documents of the API, served beside it:
//
//	/openapi.json, /openapi.yaml          OpenAPI 3.1, as huma generates it
//	/openapi-3.0.json, /openapi-3.0.yaml  OpenAPI 3.0.3, for the tools that read no 3.1
//
// Both pass redocly's lint with no error. huma's patternDescription, a
// keyword of neither version, is kept in both as x-pattern-description.
// The 3.0 document is huma's downgrade of the 3.1 one, made valid against
// the OpenAPI 3.0 schema: every schema keyword 3.0 lacks is rewritten
// (const as a one-value enum) or kept as an x- extension, and a $ref with
// a description beside it, which 3.0 ignores, is wrapped in an allOf.
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
	for _, d := range []*doc{
		{path: openAPIPath, contentType: "application/openapi+json", make: s.openAPI31},
		{path: "/openapi.yaml", contentType: "application/openapi+yaml", make: yamlOf(s.openAPI31)},
		{path: openAPI30Path, contentType: "application/openapi+json", make: s.openAPI30},
		{path: "/openapi-3.0.yaml", contentType: "application/openapi+yaml", make: yamlOf(s.openAPI30)},
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

// openAPI31 returns the API's OpenAPI 3.1 document.
func (s *Service) openAPI31() ([]byte, error) {
	b, err := json.Marshal(s.api.OpenAPI())
	if err != nil {
		return nil, fmt.Errorf("OpenAPI 3.1 document: %w", err)
	}
	return rewriteSchemas(b, schema31)
}

// openAPI30 returns the API's OpenAPI 3.0.3 document.
func (s *Service) openAPI30() ([]byte, error) {
	b, err := s.api.OpenAPI().Downgrade()
	if err != nil {
		return nil, fmt.Errorf("OpenAPI 3.0 document: %w", err)
	}
	return rewriteSchemas(b, schema30)
}

// rewriteSchemas returns the document b with every schema in it rewritten
// by fix (see eachSchema).
func rewriteSchemas(b []byte, fix func(map[string]any)) ([]byte, error) {
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("OpenAPI document: %w", err)
	}
	eachSchema(doc, fix)
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

// eachSchema finds every schema in a document (under a "schema" key and
// in components.schemas) and calls fix on it, then on each schema inside
// it.
func eachSchema(v any, fix func(map[string]any)) {
	switch x := v.(type) {
	case map[string]any:
		for k, sub := range x {
			switch {
			case k == "schema":
				walkSchema(sub, fix)
			case k == "schemas":
				if m, ok := sub.(map[string]any); ok {
					for _, s := range m {
						walkSchema(s, fix)
					}
				}
			default:
				eachSchema(sub, fix)
			}
		}
	case []any:
		for _, sub := range x {
			eachSchema(sub, fix)
		}
	}
}

// walkSchema calls fix on the schema v, then on each schema inside it.
func walkSchema(v any, fix func(map[string]any)) {
	s, ok := v.(map[string]any)
	if !ok {
		return
	}
	fix(s)
	for k, sub := range s {
		switch k {
		case "properties":
			if m, ok := sub.(map[string]any); ok {
				for _, p := range m {
					walkSchema(p, fix)
				}
			}
		case "items", "not", "additionalProperties":
			walkSchema(sub, fix)
		case "allOf", "oneOf", "anyOf":
			if list, ok := sub.([]any); ok {
				for _, p := range list {
					walkSchema(p, fix)
				}
			}
		}
	}
}

// schema31 rewrites a schema's keywords that OpenAPI 3.1 lacks:
// patternDescription becomes x-pattern-description.
func schema31(s map[string]any) {
	if d, ok := s["patternDescription"]; ok {
		delete(s, "patternDescription")
		s["x-pattern-description"] = d
	}
}

// schema30 rewrites a schema's keywords for OpenAPI 3.0: const becomes a
// one-value enum, patternDescription x-pattern-description, any other
// keyword 3.0 lacks an x- extension of its name; a $ref with other
// keywords beside it (a description), which 3.0 would ignore, goes into
// an allOf of its own.
func schema30(s map[string]any) {
	for _, k := range slices.Sorted(maps.Keys(s)) {
		v := s[k]
		switch {
		case strings.HasPrefix(k, "x-"):
		case k == "const":
			delete(s, k)
			if _, ok := s["enum"]; !ok {
				s["enum"] = []any{v}
			}
		case k == "patternDescription":
			delete(s, k)
			s["x-pattern-description"] = v
		case !schemaKeywords30[k]:
			delete(s, k)
			s["x-"+k] = v
		}
	}
	if ref, ok := s["$ref"]; ok && len(s) > 1 {
		delete(s, "$ref")
		all, _ := s["allOf"].([]any)
		s["allOf"] = append([]any{map[string]any{"$ref": ref}}, all...)
	}
}
