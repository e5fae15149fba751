package service

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode"

	"github.com/danielgtaylor/huma/v2"
)

// jsonFormat reads and writes the API's JSON. It reads a request body into
// an untyped value (what the API checks against its schema) with its
// numbers as written, so that a number no key could take is refused with
// the text the request gave and where it gave it, not rounded to another
// value first; and it refuses a key written twice in one object, at any
// depth, which the typed reading would otherwise merge past the schema
// ({"stream":{"max_rate":1e300}} then {"stream":{}} under one key).
var jsonFormat = huma.Format{
	Marshal:   huma.DefaultJSONFormat.Marshal,
	Unmarshal: unmarshalJSON,
}

// maxExact is the largest whole number a JSON number (a double) holds
// exactly: beyond it, 99999999999999999999 would be read as another
// number.
const maxExact = 1 << 53

func unmarshalJSON(data []byte, v any) error {
	into, ok := v.(*any)
	if !ok {
		return json.Unmarshal(data, v)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	x, err := readValue(dec, "", 0)
	if err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("the body holds more than one JSON value")
	}
	*into = x
	return nil
}

// maxDepth bounds how deep a request's objects and arrays nest.
const maxDepth = 100

// readValue reads the next JSON value of dec, at path (as a request names
// its fields) and depth, with its numbers as float64. It refuses a number
// out of a double's range (1e999), a whole number beyond maxExact, a key
// written twice in one object and nesting deeper than maxDepth, naming
// where.
func readValue(dec *json.Decoder, path string, depth int) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := tok.(json.Delim); ok && (d == '{' || d == '[') && depth == maxDepth {
		return nil, fmt.Errorf("%s: nested deeper than %d levels", fieldName(path), maxDepth)
	}
	switch t := tok.(type) {
	case json.Number:
		return number(t, path)
	case json.Delim:
		switch t {
		case '{':
			m := map[string]any{}
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return nil, err
				}
				key, ok := k.(string)
				if !ok {
					return nil, fmt.Errorf("%s: a key that is not a string", fieldName(path))
				}
				name := fieldPath(path, key)
				if _, seen := m[key]; seen {
					return nil, fmt.Errorf("%s: the key is written twice: write each key once", name)
				}
				if m[key], err = readValue(dec, name, depth+1); err != nil {
					return nil, err
				}
			}
			_, err := dec.Token() // }
			return m, err
		case '[':
			a := []any{}
			for i := 0; dec.More(); i++ {
				e, err := readValue(dec, fmt.Sprintf("%s[%d]", path, i), depth+1)
				if err != nil {
					return nil, err
				}
				a = append(a, e)
			}
			_, err := dec.Token() // ]
			return a, err
		}
	}
	return tok, nil // a string, a boolean or null
}

// number returns x as a float64, or an error naming it (at path) where it
// is out of a double's range (1e999) or a whole number beyond maxExact.
func number(x json.Number, path string) (float64, error) {
	f, err := strconv.ParseFloat(string(x), 64)
	switch {
	case err != nil || math.IsInf(f, 0):
		return 0, fmt.Errorf("%s: %s is not a number any field takes (out of range)", fieldName(path), x)
	case !strings.ContainsAny(string(x), ".eE") && math.Abs(f) > maxExact:
		return 0, fmt.Errorf("%s: %s is too large: whole numbers of a request go up to %d", fieldName(path), x, int64(maxExact))
	}
	return f, nil
}

// fieldPath names the field key of the object at path, as a request names
// its fields: dotted, a key that holds '.', '"', a space or a character
// that does not print, or that is empty, quoted.
func fieldPath(path, key string) string {
	name := key
	if key == "" || strings.ContainsAny(key, `." `) || strings.IndexFunc(key, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		name = strconv.Quote(key)
	}
	if path == "" {
		return name
	}
	return path + "." + name
}

// fieldName names a field at path for a message; the body itself is
// "the body".
func fieldName(path string) string {
	if path == "" {
		return "the body"
	}
	return path
}

// Metadata is a request's user metadata: any JSON object, whose numbers
// keep the type they are written with, as a JSON reader in Python or C
// keeps it: a whole number written without a fraction or exponent that an
// int64 holds is an int64 (a proposal number stays 20261234, not
// 2.0261234e7), any other number a float64.
type Metadata map[string]any

// UnmarshalJSON reads m with its numbers as written.
func (m *Metadata) UnmarshalJSON(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var x map[string]any
	if err := dec.Decode(&x); err != nil {
		return err
	}
	*m = typedNumbers(x).(map[string]any)
	return nil
}

// typedNumbers returns v with each json.Number as an int64 or float64.
func typedNumbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		if !strings.ContainsAny(string(x), ".eE") {
			if i, err := x.Int64(); err == nil {
				return i
			}
		}
		f, _ := x.Float64() // checkNumbers refused what no double holds
		return f
	case map[string]any:
		for k, e := range x {
			x[k] = typedNumbers(e)
		}
	case []any:
		for i, e := range x {
			x[i] = typedNumbers(e)
		}
	}
	return v
}
