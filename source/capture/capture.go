// Package capture reads and writes capture files (.pmcap): what a receiver
// saw, byte for byte, for offline replay.
//
// A capture file is the 8-byte magic "PMCAP001", a little-endian uint32
// metadata length, a JSON metadata object, zero padding up to a multiple of
// 8 bytes, and then frame records back to back, each one frame header and
// its payload exactly as on the wire (see spec/frames.md).
package capture

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
)

// Magic is the first eight bytes of every capture file.
var Magic = [8]byte{'P', 'M', 'C', 'A', 'P', '0', '0', '1'}

// prefixSize is the size of the magic and the metadata length.
const prefixSize = 12

// ErrNotCapture is wrapped by errors for a file that does not start like a
// capture file: wrong magic, metadata that is not a JSON object, or
// non-zero padding.
var ErrNotCapture = errors.New("not a capture file")

// ErrTruncated is wrapped by errors for a capture file that ends inside a
// record (or inside its metadata): the capture was cut short.
var ErrTruncated = errors.New("capture cut short")

// Metadata is the JSON object at the start of a capture file. Profile,
// Created and Software are the fields every writer records; every other
// top-level field is kept, undecoded, in Extra. The metadata is free-form:
// a writer may record any of the three as something other than a string
// (a number, an object), and such a value is kept in Extra too, its field
// left empty.
type Metadata struct {
	Profile  string // beamline profile the capture was taken with
	Created  string // when the capture was started, RFC 3339
	Software string // program and version that wrote the file

	// Extra holds every other top-level field by name, as raw JSON.
	Extra map[string]json.RawMessage
}

// Names of the fields every writer records.
const (
	keyProfile  = "profile"
	keyCreated  = "created"
	keySoftware = "software"
)

// MarshalJSON encodes m as one flat JSON object with sorted keys. A
// recorded field that is empty and held in Extra (a value that is not a
// string) is written as Extra holds it.
func (m Metadata) MarshalJSON() ([]byte, error) {
	obj := make(map[string]json.RawMessage, len(m.Extra)+3)
	maps.Copy(obj, m.Extra)
	for _, kv := range [...]struct{ k, v string }{
		{keyProfile, m.Profile}, {keyCreated, m.Created}, {keySoftware, m.Software},
	} {
		if _, kept := m.Extra[kv.k]; kept && kv.v == "" {
			continue
		}
		b, err := json.Marshal(kv.v)
		if err != nil {
			return nil, err
		}
		obj[kv.k] = b
	}
	return json.Marshal(obj)
}

// UnmarshalJSON decodes a JSON object into m. A recorded field whose
// value is not a JSON string stays in Extra, as it is.
func (m *Metadata) UnmarshalJSON(b []byte) error {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(b, &obj); err != nil {
		return err
	}
	if obj == nil {
		return errors.New("metadata is null, want a JSON object")
	}
	*m = Metadata{}
	for _, kv := range [...]struct {
		k string
		v *string
	}{
		{keyProfile, &m.Profile}, {keyCreated, &m.Created}, {keySoftware, &m.Software},
	} {
		raw, ok := obj[kv.k]
		if !ok {
			continue
		}
		if err := json.Unmarshal(raw, kv.v); err != nil {
			// Free-form metadata: not a string, so kept as it is.
			*kv.v = ""
			continue
		}
		delete(obj, kv.k)
	}
	if len(obj) > 0 {
		m.Extra = obj
	}
	return nil
}

// Set stores v, encoded as JSON, as the top-level field key.
func (m *Metadata) Set(key string, v any) error {
	switch key {
	case keyProfile, keyCreated, keySoftware:
		return fmt.Errorf("metadata field %q is a struct field, not an extra", key)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("metadata field %q: %w", key, err)
	}
	if m.Extra == nil {
		m.Extra = make(map[string]json.RawMessage)
	}
	m.Extra[key] = b
	return nil
}

// SetFields sets several fields, given as key, value, key, value ...
func (m *Metadata) SetFields(kv ...any) error {
	for i := 0; i+1 < len(kv); i += 2 {
		if err := m.Set(kv[i].(string), kv[i+1]); err != nil {
			return err
		}
	}
	return nil
}

// Get decodes the top-level field key into v. It reports false, with no
// error, when the field is absent.
func (m Metadata) Get(key string, v any) (bool, error) {
	raw, ok := m.Extra[key]
	if !ok {
		return false, nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return true, fmt.Errorf("metadata field %q: %w", key, err)
	}
	return true, nil
}

// padding returns how many zero bytes follow metadata of n bytes so that
// the first record starts at a multiple of 8.
func padding(n int) int { return (8 - (prefixSize+n)%8) % 8 }
