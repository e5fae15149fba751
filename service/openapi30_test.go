package service

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
)

// officialSchema30 is the OpenAPI Initiative's JSON schema of OpenAPI 3.0
// documents, as Debian packages it (openapi-specification).
const officialSchema30 = "/usr/share/openapi-specification/schemas/v3.0/schema.json"

// fetchDocument returns the body of a GET of path.
func fetchDocument(t *testing.T, base, path string) []byte {
	t.Helper()
	resp, err := http.Get(base + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/openapi+") {
		t.Fatalf("GET %s: %d %s", path, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	return b
}

// documentValidator validates a document with libopenapi and returns its
// validator of requests and responses.
func documentValidator(t *testing.T, name string, spec []byte) validator.Validator {
	t.Helper()
	doc, err := libopenapi.NewDocument(spec)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		t.Fatalf("%s: %v", name, errs)
	}
	if ok, verrs := v.ValidateDocument(); !ok {
		for _, e := range verrs {
			t.Errorf("%s: %v", name, e)
		}
	}
	return v
}

// keywords returns every object key in a JSON document, with how often.
func keywords(v any, into map[string]int) {
	switch x := v.(type) {
	case map[string]any:
		for k, sub := range x {
			into[k]++
			keywords(sub, into)
		}
	case []any:
		for _, sub := range x {
			keywords(sub, into)
		}
	}
}

// refSiblings counts the objects of a JSON document with a $ref and
// another key.
func refSiblings(v any) int {
	n := 0
	switch x := v.(type) {
	case map[string]any:
		if _, ok := x["$ref"]; ok && len(x) > 1 {
			n++
		}
		for _, sub := range x {
			n += refSiblings(sub)
		}
	case []any:
		for _, sub := range x {
			n += refSiblings(sub)
		}
	}
	return n
}

// TestOpenAPILint lints the four documents as served with redocly's lint
// (npm @redocly/cli), which many of the API's users run: no error in any.
// It runs where redocly is installed (on PATH, or in npx's cache), never
// fetching it.
func TestOpenAPILint(t *testing.T) {
	lint := []string{"redocly", "lint"}
	if _, err := exec.LookPath("redocly"); err != nil {
		lint = []string{"npx", "--no-install", "@redocly/cli", "lint"}
		if _, err := exec.LookPath("npx"); err != nil {
			t.Skip("redocly is not installed (npm install -g @redocly/cli): the documents are not linted")
		}
	}
	_, c := newTestService(t, &fakeRunner{}, Config{Token: "0123456789abcdef"})
	dir := t.TempDir()
	var files []string
	for _, p := range []string{"/openapi.json", "/openapi.yaml", "/openapi-3.0.json", "/openapi-3.0.yaml"} {
		f := filepath.Join(dir, strings.TrimPrefix(p, "/"))
		if err := os.WriteFile(f, fetchDocument(t, c.base, p), 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, lint[0], append(lint[1:], files...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "REDOCLY_TELEMETRY=off", "REDOCLY_SUPPRESS_UPDATE_NOTICE=true", "npm_config_offline=true")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		t.Logf("%s", out)
	case lint[0] == "npx" && !bytes.Contains(out, []byte("validating")):
		t.Skipf("redocly is not installed (npm install -g @redocly/cli), npx has none: %s", bytes.TrimSpace(out))
	case errors.As(err, &exit):
		t.Errorf("redocly lint finds errors in the documents:\n%s", out)
	default:
		t.Fatalf("redocly lint: %v\n%s", err, out)
	}
}

// responses returns each operation's response codes: "GET /v1/status" ->
// ["200", ...].
func responses(t *testing.T, spec []byte) map[string][]string {
	t.Helper()
	var doc struct {
		Paths map[string]map[string]struct {
			Responses map[string]any `json:"responses"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(spec, &doc); err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for path, ops := range doc.Paths {
		for method, op := range ops {
			var codes []string
			for code := range op.Responses {
				codes = append(codes, code)
			}
			slices.Sort(codes)
			out[strings.ToUpper(method)+" "+path] = codes
		}
	}
	return out
}

// TestOpenAPIDocuments: the service serves OpenAPI 3.1 at /openapi.json and
// 3.0 at /openapi-3.0.json; libopenapi validates both, kin-openapi and the
// OAS 3.0 JSON schema the 3.0 one (so no const, no patternDescription);
// both hold every path and the same responses of each operation, and real
// requests and answers of every new path, errors included, hold to both.
func TestOpenAPIDocuments(t *testing.T) {
	r := &statusRunner{fakeRunner: &fakeRunner{planned: 3, tick: time.Millisecond},
		storage: Storage{Directory: "/data", FreeBytes: 1 << 30}}
	s, c := newTestService(t, r, Config{Token: "0123456789abcdef"})
	spec31 := fetchDocument(t, c.base, "/openapi.json")
	spec30 := fetchDocument(t, c.base, "/openapi-3.0.json")
	for _, p := range []string{"/openapi.yaml", "/openapi-3.0.yaml"} {
		if b := fetchDocument(t, c.base, p); !bytes.Contains(b, []byte("/v1/status:")) {
			t.Errorf("%s lacks /v1/status", p)
		}
	}
	v31 := documentValidator(t, "3.1", spec31)
	v30 := documentValidator(t, "3.0", spec30)

	// kin-openapi, which reads 3.0 only, as many 3.0 generators do.
	loader := openapi3.NewLoader()
	if kin, err := loader.LoadFromData(spec30); err != nil {
		t.Errorf("kin-openapi cannot load /openapi-3.0.json: %v", err)
	} else if err := kin.Validate(context.Background()); err != nil {
		t.Errorf("kin-openapi: %v", err)
	}

	var doc30, doc31 map[string]any
	json.Unmarshal(spec30, &doc30)
	json.Unmarshal(spec31, &doc31)
	if doc30["openapi"] != "3.0.3" {
		t.Errorf("/openapi-3.0.json is OpenAPI %v", doc30["openapi"])
	}
	kw := map[string]int{}
	keywords(doc30, kw)
	for _, k := range []string{"const", "patternDescription", "examples", "$schema", "contentEncoding"} {
		if kw[k] > 0 {
			t.Errorf("the 3.0 document has %q %d times", k, kw[k])
		}
	}
	if n := refSiblings(doc30); n > 0 {
		t.Errorf("the 3.0 document has %d $ref with keywords beside it, which 3.0 ignores", n)
	}
	// What redocly's lint refuses in either version (TestOpenAPILint runs
	// it where it is installed): no servers, a keyword of neither version.
	kw31 := map[string]int{}
	keywords(doc31, kw31)
	for name, doc := range map[string]map[string]any{"3.0": doc30, "3.1": doc31} {
		if servers, _ := doc["servers"].([]any); len(servers) == 0 {
			t.Errorf("the %s document names no servers", name)
		}
		var wait struct {
			Paths map[string]map[string]struct {
				Parameters []struct {
					Name   string
					Schema map[string]any
				}
			}
		}
		b, _ := json.Marshal(doc)
		json.Unmarshal(b, &wait)
		for _, p := range wait.Paths["/v1/scans/{id}/wait"]["get"].Parameters {
			if p.Name == "timeout" && (p.Schema["type"] != "number" || p.Schema["minimum"] != 0.0 || p.Schema["maximum"] != 600.0) {
				t.Errorf("the %s document's wait timeout: %v, want a number from 0 to 600", name, p.Schema)
			}
		}
	}
	if kw31["patternDescription"] > 0 || kw31["x-pattern-description"] == 0 {
		t.Errorf("the 3.1 document has patternDescription %d times, x-pattern-description %d", kw31["patternDescription"], kw31["x-pattern-description"])
	}

	// The official schema of OpenAPI 3.0 documents, with Python's
	// jsonschema (Debian's python3-jsonschema).
	if _, err := os.Stat(officialSchema30); err != nil {
		t.Errorf("no %s (Debian's openapi-specification): %v", officialSchema30, err)
	} else if py, err := exec.LookPath("/usr/bin/python3"); err != nil {
		t.Errorf("no /usr/bin/python3: %v", err)
	} else {
		file := filepath.Join(t.TempDir(), "openapi-3.0.json")
		os.WriteFile(file, spec30, 0o644)
		cmd := exec.Command(py, "-c", `
import json, sys, jsonschema
schema = json.load(open(sys.argv[1]))
doc = json.load(open(sys.argv[2]))
errors = sorted(jsonschema.Draft4Validator(schema).iter_errors(doc), key=lambda e: list(e.absolute_path))
for e in errors[:20]:
    print("/".join(map(str, e.absolute_path)), e.message[:300])
sys.exit(1 if errors else 0)
`, officialSchema30, file)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("the OAS 3.0 schema refuses /openapi-3.0.json: %v\n%s", err, out)
		}
	}

	ops31, ops30 := responses(t, spec31), responses(t, spec30)
	for _, op := range []string{"GET /v1/status", "GET /v1/health", "GET /v1/version", "GET /v1/profiles",
		"GET /v1/profiles/{name}", "GET /v1/scans/{id}/preview.png", "GET /v1/events", "POST /v1/scans"} {
		if ops31[op] == nil {
			t.Errorf("the 3.1 document lacks %s", op)
		}
	}
	for op, codes := range ops31 {
		if !slices.Equal(codes, ops30[op]) {
			t.Errorf("%s: responses %v in 3.1, %v in 3.0", op, codes, ops30[op])
		}
	}
	if len(ops30) != len(ops31) {
		t.Errorf("%d operations in 3.1, %d in 3.0", len(ops31), len(ops30))
	}
	if got := ops31["GET /v1/health"]; !slices.Contains(got, "503") {
		t.Errorf("health's responses %v lack 503", got)
	}

	// Real requests and answers, against both documents.
	check := func(method, path string, body any, want int) {
		t.Helper()
		var b []byte
		if body != nil {
			b, _ = json.Marshal(body)
		}
		req, _ := http.NewRequest(method, c.base+path, bytes.NewReader(b))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+c.token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("%s %s: %d, want %d: %.300s", method, path, resp.StatusCode, want, got)
		}
		for name, v := range map[string]validator.Validator{"3.1": v31, "3.0": v30} {
			resp.Body = io.NopCloser(bytes.NewReader(got))
			req.Body = io.NopCloser(bytes.NewReader(b))
			if ok, verrs := v.ValidateHttpRequestResponse(req, resp); !ok {
				for _, e := range verrs {
					t.Errorf("%s %s against %s: %v", method, path, name, e)
				}
			}
		}
	}
	check("GET", "/v1/status", nil, http.StatusOK)
	check("GET", "/v1/health", nil, http.StatusOK)
	check("GET", "/v1/version", nil, http.StatusOK)
	check("GET", "/v1/profiles", nil, http.StatusOK)
	check("GET", "/v1/profiles/beam", nil, http.StatusOK)
	check("GET", "/v1/profiles/nope", nil, http.StatusNotFound)
	check("GET", "/v1/profiles/broken", nil, http.StatusUnprocessableEntity)
	check("POST", "/v1/scans", arm("o1"), http.StatusCreated)
	check("GET", "/v1/scans/o1/wait?timeout=10", nil, http.StatusOK)
	check("GET", "/v1/status", nil, http.StatusOK)
	check("GET", "/v1/scans/o1/preview.png", nil, http.StatusNotFound)
	sc := &imageScan{}
	sc.next()
	endedJob(s, "img", Done, "", sc)
	check("GET", "/v1/scans/img/preview.png?max_side=32", nil, http.StatusOK)
	endedJob(s, "bad", Failed, "the disk is full", nil)
	check("GET", "/v1/status", nil, http.StatusOK)
	check("GET", "/v1/health", nil, http.StatusServiceUnavailable)
}
