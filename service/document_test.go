package service

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestDocumentSaysWhatTheAPIDoes: the OpenAPI document lists on each
// operation every status the API gives it (the guard's 401 and 403, and
// 415 for a POST; an arm's 400, 409, 413, 422 and 503), each /v1
// operation needs the token, and the overrides a request may give are
// the allow-list, no other key.
func TestDocumentSaysWhatTheAPIDoes(t *testing.T) {
	r := &fakeRunner{planned: 1, tick: time.Millisecond}
	_, c := newTestService(t, r, Config{Token: "0123456789abcdef"})
	resp, err := http.Get(c.base + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Paths      map[string]map[string]map[string]any
		Components struct {
			Schemas map[string]struct {
				Properties           map[string]any
				AdditionalProperties any
			}
		}
	}
	err = json.NewDecoder(resp.Body).Decode(&doc)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"post /v1/scans":             {"400", "401", "403", "409", "413", "415", "422", "503"},
		"post /v1/scans/{id}/stop":   {"401", "403", "404", "409", "415", "422"},
		"post /v1/scans/{id}/cancel": {"401", "403", "404", "409", "415", "422"},
		"get /v1/scans":              {"401", "403"},
		"get /v1/scans/{id}":         {"401", "403", "404", "422"},
		"get /v1/scans/{id}/wait":    {"401", "403", "404", "422"},
		"get /v1/events":             {"401", "403"},
	}
	ops := 0
	for path, item := range doc.Paths {
		for method, op := range item {
			if !strings.HasPrefix(path, "/v1/") {
				continue
			}
			ops++
			name := method + " " + path
			responses, _ := op["responses"].(map[string]any)
			codes := []string{"401", "403"}
			if method != "get" {
				codes = append(codes, "415")
			}
			codes = append(codes, want[name]...)
			for _, code := range codes {
				if responses[code] == nil {
					t.Errorf("%s does not list %s", name, code)
				}
			}
			if sec, _ := json.Marshal(op["security"]); string(sec) != `[{"token":[]}]` {
				t.Errorf("%s: security %s, want the token", name, sec)
			}
		}
	}
	if ops < len(want) {
		t.Errorf("%d operations under /v1/, want %d or more", ops, len(want))
	}
	allowed := map[string][]string{
		"Overrides":       {"output", "stream"},
		"OutputOverrides": {"compression", "directory", "layout", "level", "template"},
		"StreamOverrides": {"every", "max_rate"},
	}
	for name, keys := range allowed {
		s, ok := doc.Components.Schemas[name]
		if !ok {
			t.Errorf("no schema %s", name)
			continue
		}
		var got []string
		for k := range s.Properties {
			got = append(got, k)
		}
		slices.Sort(got)
		if !slices.Equal(got, keys) || s.AdditionalProperties != false {
			t.Errorf("schema %s: keys %v (additional %v), want %v and no other", name, got, s.AdditionalProperties, keys)
		}
	}
}
