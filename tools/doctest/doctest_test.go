package doctest

import (
	"reflect"
	"strings"
	"testing"
)

func TestExtract(t *testing.T) {
	doc := "# Title\n" +
		"```\nnot marked\n```\n" +
		"<!-- doctest -->\n" +
		"```sh\nh5ingest simulate -o a.pmcap\nh5ingest verify a.h5\n```\n" +
		"text\n" +
		"<!-- doctest\nbackground: h5ingest acquire --listen 127.0.0.1:7100\nbackground: sleep 1\n-->\n\n" +
		"````\nh5ingest send a.pmcap\n```\ninner fence\n````\n" +
		"~~~\nunmarked tilde\n~~~\n" +
		"<!-- doctest\nbefore: h5ingest replay a.pmcap -o a.h5\n-->\n" +
		"```python\nimport h5py\n```\n"
	got, err := Extract("README.md", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	want := []Block{
		{File: "README.md", Line: 6, Lang: "sh", Text: "h5ingest simulate -o a.pmcap\nh5ingest verify a.h5\n"},
		{File: "README.md", Line: 16, Text: "h5ingest send a.pmcap\n```\ninner fence\n",
			Background: []string{"h5ingest acquire --listen 127.0.0.1:7100", "sleep 1"}},
		{File: "README.md", Line: 27, Lang: "python", Text: "import h5py\n", Before: []string{"h5ingest replay a.pmcap -o a.h5"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Extract =\n%#v\nwant\n%#v", got, want)
	}
	if s := got[1].String(); s != "README.md:16" {
		t.Errorf("String() = %q", s)
	}
}

func TestExtractErrors(t *testing.T) {
	for _, tc := range []struct{ doc, want string }{
		{"<!-- doctest -->\ntext\n```\nx\n```\n", "d.md:1: doctest marker without a code block"},
		{"<!-- doctest -->\n", "d.md:1: doctest marker without a code block"},
		{"<!-- doctest -->\n<!-- doctest -->\n```\nx\n```\n", "d.md:1: doctest marker without a code block"},
		{"<!-- doctest\nbackground: x\n", "d.md:1: doctest marker does not end"},
		{"<!-- doctest\nforeground: x\n-->\n```\nx\n```\n", "d.md:2: doctest setting \"foreground: x\": the keys are before and background"},
		{"<!-- doctest -->\n```go\nx\n```\n", `d.md:2: doctest block of language "go"`},
		{"<!-- doctest\nbackground\n-->\n```\nx\n```\n", "want key: value"},
		{"<!-- doctest background: -->\n```\nx\n```\n", "the keys are before and background"},
		{"<!-- doctest -->\n```\nx\n", "d.md: code block does not end"},
	} {
		_, err := Extract("d.md", []byte(tc.doc))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Extract(%q): %v, want an error saying %q", tc.doc, err, tc.want)
		}
	}
}
