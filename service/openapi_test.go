package service

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
)

// TestOpenAPIDocument validates the served OpenAPI document against the
// OpenAPI schema, then holds real requests and responses, errors
// included, to it.
func TestOpenAPIDocument(t *testing.T) {
	r := &fakeRunner{planned: 3, tick: time.Millisecond}
	_, c := newTestService(t, r, Config{Token: "tok"})
	resp, err := http.Get(c.base + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	spec, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	doc, err := libopenapi.NewDocument(spec)
	if err != nil {
		t.Fatal(err)
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if ok, verrs := v.ValidateDocument(); !ok {
		for _, e := range verrs {
			t.Errorf("document: %v", e)
		}
	}
	var paths struct{ Paths map[string]any }
	json.Unmarshal(spec, &paths)
	for _, p := range []string{"/v1/scans", "/v1/scans/{id}", "/v1/scans/{id}/wait", "/v1/scans/{id}/stop", "/v1/scans/{id}/cancel", "/v1/scans/{id}/files", "/v1/events"} {
		if paths.Paths[p] == nil {
			t.Errorf("the document lacks %s", p)
		}
	}

	check := func(method, path string, body any, want int) {
		t.Helper()
		var b []byte
		if body != nil {
			b, _ = json.Marshal(body)
		}
		req, _ := http.NewRequest(method, c.base+path, bytes.NewReader(b))
		if method == http.MethodPost {
			req.Header.Set("Content-Type", "application/json")
		}
		req.Header.Set("Authorization", "Bearer tok")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("%s %s: %d, want %d: %s", method, path, resp.StatusCode, want, got)
		}
		resp.Body = io.NopCloser(bytes.NewReader(got))
		req.Body = io.NopCloser(bytes.NewReader(b))
		if ok, verrs := v.ValidateHttpRequestResponse(req, resp); !ok {
			for _, e := range verrs {
				t.Errorf("%s %s: %v", method, path, e)
			}
		}
	}
	check("POST", "/v1/scans", arm("o1"), http.StatusCreated)
	check("GET", "/v1/scans/o1/wait?timeout=10", nil, http.StatusOK)
	check("GET", "/v1/scans/o1", nil, http.StatusOK)
	check("GET", "/v1/scans/o1/files", nil, http.StatusOK)
	check("GET", "/v1/scans", nil, http.StatusOK)
	check("POST", "/v1/scans/o1/stop", nil, http.StatusConflict)
	check("GET", "/v1/scans/nope", nil, http.StatusNotFound)
}
