package service

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/danielgtaylor/huma/v2"
)

// checkText refuses an arm request whose text holds a NUL anywhere: a
// key or a string of user_metadata at any depth, the title, the sample,
// a directory. The writer makes HDF5 names and strings of them, which C
// cuts at a NUL, so that a key would fail the scan at its first frame and
// a title be cut short. Every field that holds one is named, in the
// request's terms (body.user_metadata."a\x00b").
func checkText(req ArmRequest) error {
	b, err := json.Marshal(req)
	if err != nil {
		return huma.Error500InternalServerError("read the request back", err)
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return huma.Error500InternalServerError("read the request back", err)
	}
	var bad []error
	var walk func(v any, path string)
	walk = func(v any, path string) {
		switch x := v.(type) {
		case string:
			if strings.ContainsRune(x, 0) {
				bad = append(bad, &huma.ErrorDetail{Location: "body." + path, Value: x,
					Message: "holds a NUL character, which no text of a request may: HDF5 cuts its names and strings there"})
			}
		case map[string]any:
			for _, k := range slices.Sorted(maps.Keys(x)) {
				name := fieldPath(path, k)
				if strings.ContainsRune(k, 0) {
					bad = append(bad, &huma.ErrorDetail{Location: "body." + name, Value: k,
						Message: "the key holds a NUL character, which no name may: HDF5 cuts its names there"})
				}
				walk(x[k], name)
			}
		case []any:
			for i, e := range x {
				walk(e, fmt.Sprintf("%s[%d]", path, i))
			}
		}
	}
	walk(v, "")
	if len(bad) > 0 {
		return huma.Error422UnprocessableEntity("validation failed", bad...)
	}
	return nil
}
