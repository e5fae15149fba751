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

	"github.com/danielgtaylor/huma/v2"
)

// jsonFormat reads and writes the API's JSON. It reads a request body into
// an untyped value (what the API checks against its schema) with its
// numbers as written, so that a number no key could take is refused with
// the text the request gave and where it gave it, not rounded to another
// value first (see checkNumbers).
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
	var x any
	if err := dec.Decode(&x); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("the body holds more than one JSON value")
	}
	x, err := checkNumbers(x, "")
	if err != nil {
		return err
	}
	*into = x
	return nil
}

// checkNumbers returns v with its numbers as float64, or an error naming
// the first number (at path, as a request names its fields) that is out
// of a double's range (1e999) or a whole number beyond maxExact.
func checkNumbers(v any, path string) (any, error) {
	switch x := v.(type) {
	case json.Number:
		f, err := strconv.ParseFloat(string(x), 64)
		switch {
		case err != nil || math.IsInf(f, 0):
			return nil, fmt.Errorf("%s: %s is not a number any field takes (out of range)", fieldName(path), x)
		case !strings.ContainsAny(string(x), ".eE") && math.Abs(f) > maxExact:
			return nil, fmt.Errorf("%s: %s is too large: whole numbers of a request go up to %d", fieldName(path), x, int64(maxExact))
		}
		return f, nil
	case map[string]any:
		for k, e := range x {
			name := k
			if strings.ContainsAny(k, `." `) || k == "" {
				name = strconv.Quote(k)
			}
			if path != "" {
				name = path + "." + name
			}
			c, err := checkNumbers(e, name)
			if err != nil {
				return nil, err
			}
			x[k] = c
		}
	case []any:
		for i, e := range x {
			c, err := checkNumbers(e, fmt.Sprintf("%s[%d]", path, i))
			if err != nil {
				return nil, err
			}
			x[i] = c
		}
	}
	return v, nil
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
