package config

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	yaml "go.yaml.in/yaml/v3"
)

// profileDoc is a profile file's YAML as a tree of nodes, which tells
// on which line each key stands, so that an error about a key the file
// sets names the line.
type profileDoc struct {
	root *yaml.Node // the document's top mapping; nil for an empty file
}

// parseDoc parses a profile file's text. Its error, for text that is not
// YAML or that repeats a key, says on which line where YAML does.
func parseDoc(text []byte) (profileDoc, error) {
	var probe any // decoded as well, for the errors only a decode finds: a key repeated
	if err := yaml.Unmarshal(text, &probe); err != nil {
		return profileDoc{}, newSyntaxError(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(text, &doc); err != nil {
		return profileDoc{}, newSyntaxError(err)
	}
	if len(doc.Content) == 0 {
		return profileDoc{}, nil
	}
	return profileDoc{root: doc.Content[0]}, nil
}

// syntaxError is text that is not a profile's YAML, at a line of the
// file where known (line above 0).
type syntaxError struct {
	line int
	msg  string
}

func (e *syntaxError) Error() string { return e.msg }

// yamlAt matches the start of the YAML library's errors, "yaml: line 3:
// ...", and of each of its unmarshal errors, "line 4: ...".
var yamlAt = regexp.MustCompile(`^(?:yaml: )?line (\d+): `)

// newSyntaxError takes the line out of a YAML error, so that the message
// can name it after the file as editors and compilers do (FILE:LINE:).
func newSyntaxError(err error) *syntaxError {
	msgs := []string{err.Error()}
	var te *yaml.TypeError
	if errors.As(err, &te) && len(te.Errors) > 0 {
		msgs = te.Errors
	}
	e := &syntaxError{}
	for i, m := range msgs {
		if at := yamlAt.FindStringSubmatch(m); at != nil {
			if i == 0 {
				e.line, _ = strconv.Atoi(at[1])
				m = m[len(at[0]):]
			}
		} else {
			m = strings.TrimPrefix(m, "yaml: ")
		}
		msgs[i] = m
	}
	e.msg = strings.Join(msgs, "; ")
	return e
}

// line returns the line on which the file sets key, a dotted key with
// list indices as errors name it ("detector.modules[1].x"): the line of
// the deepest part of it that the file holds; 0 where it holds none.
func (d profileDoc) line(key string) int {
	n, line := d.root, 0
	for part := range strings.SplitSeq(key, ".") {
		name, index := part, -1
		if i := strings.IndexByte(part, '['); i >= 0 && strings.HasSuffix(part, "]") {
			name = part[:i]
			if x, err := strconv.Atoi(part[i+1 : len(part)-1]); err == nil {
				index = x
			}
		}
		if n == nil || n.Kind != yaml.MappingNode {
			return line
		}
		var value *yaml.Node
		for j := 0; j+1 < len(n.Content); j += 2 {
			if strings.EqualFold(n.Content[j].Value, name) {
				line, value = n.Content[j].Line, n.Content[j+1]
			}
		}
		if value == nil {
			return line
		}
		n = value
		if index >= 0 {
			if n.Kind != yaml.SequenceNode || index >= len(n.Content) {
				return line
			}
			n = n.Content[index]
			line = n.Line
		}
	}
	return line
}

// at names a place in the profile file where, at line (none for 0).
func at(where string, line int) string {
	if line <= 0 {
		return where
	}
	return fmt.Sprintf("%s:%d", where, line)
}

// YAML returns the profile as a profile file holds it, which loads as
// the same profile again: every key, in the order of Keys, nested by
// its sections, each under a comment that says what it means and, where
// sources has it, after it where its value came from.
func (p Profile) YAML(sources Sources) ([]byte, error) {
	values := p.Values()
	root := &yaml.Node{Kind: yaml.MappingNode}
	for _, k := range Keys {
		parts := strings.Split(k.Name, ".")
		v, ok := lookup(values, parts)
		if !ok {
			continue
		}
		m := root
		for _, section := range parts[:len(parts)-1] {
			m = child(m, section)
		}
		key := &yaml.Node{Kind: yaml.ScalarNode, Value: parts[len(parts)-1], HeadComment: k.Help}
		var value yaml.Node
		if err := value.Encode(v); err != nil {
			return nil, fmt.Errorf("key %s: %w", k.Name, err)
		}
		if from := sources[k.Name]; from != "" {
			if value.Kind == yaml.ScalarNode || len(value.Content) == 0 {
				value.LineComment = from
			} else {
				key.LineComment = from
			}
		}
		m.Content = append(m.Content, key, &value)
	}
	var b strings.Builder
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(root); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return []byte(b.String()), nil
}

// lookup returns the value at the path of keys in nested maps.
func lookup(m map[string]any, path []string) (any, bool) {
	for i, k := range path {
		v, ok := m[k]
		if !ok {
			return nil, false
		}
		if i == len(path)-1 {
			return v, true
		}
		if m, ok = v.(map[string]any); !ok {
			return nil, false
		}
	}
	return nil, false
}

// child returns the mapping under key in the mapping m, added where m
// has none.
func child(m *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	c := &yaml.Node{Kind: yaml.MappingNode}
	m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: key}, c)
	return c
}

// scalar returns the text a file writes for key, a dotted key of
// mappings alone, as written: "440" for an unquoted 440, which YAML
// would read as a number; ok false where the file sets no scalar there.
func (d profileDoc) scalar(key string) (text string, ok bool) {
	n := d.root
	for part := range strings.SplitSeq(key, ".") {
		if n == nil || n.Kind != yaml.MappingNode {
			return "", false
		}
		var value *yaml.Node
		for j := 0; j+1 < len(n.Content); j += 2 {
			if strings.EqualFold(n.Content[j].Value, part) {
				value = n.Content[j+1]
			}
		}
		n = value
	}
	if n == nil || n.Kind != yaml.ScalarNode {
		return "", false
	}
	return n.Value, true
}
