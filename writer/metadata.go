package writer

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"path"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unsafe"
)

// Metadata is what a file says of its scan besides the frames and the
// detector: what Options give a file to write, and what Reader.Metadata
// reads back.
type Metadata struct {
	Title        string
	SampleName   string
	ExperimentID string
	// UserMetadata is kept as Options.UserMetadata says; read back, its
	// values are strings, int64s (uint64s above int64's range), float64s,
	// bools and maps of them.
	UserMetadata map[string]any
	// StartTime and EndTime are the entry's start_time and end_time, to
	// the microsecond; zero where the file has none.
	StartTime, EndTime time.Time
}

// Equal reports whether m and o are written alike in a file: the same
// strings, times to the microsecond, and user metadata of the same stored
// values (an integer of any Go type and its int64 are alike, a slice and
// its JSON text too; nil and empty are alike).
func (m Metadata) Equal(o Metadata) bool {
	sameTime := func(a, b time.Time) bool {
		return a.IsZero() == b.IsZero() && (a.IsZero() || a.Format(timeFormat) == b.Format(timeFormat))
	}
	if m.Title != o.Title || m.SampleName != o.SampleName || m.ExperimentID != o.ExperimentID ||
		!sameTime(m.StartTime, o.StartTime) || !sameTime(m.EndTime, o.EndTime) {
		return false
	}
	if len(m.UserMetadata) == 0 || len(o.UserMetadata) == 0 {
		return len(m.UserMetadata) == len(o.UserMetadata)
	}
	a, err1 := storedMap(m.UserMetadata)
	b, err2 := storedMap(o.UserMetadata)
	return err1 == nil && err2 == nil && reflect.DeepEqual(a, b)
}

// scanMetadata writes what the scan's options say of it besides the
// data: the experiment, the program and its configuration, the user's
// metadata.
func (b *Builder) scanMetadata(entry hid) {
	o := &b.w.opts
	if o.ExperimentID != "" {
		b.str(entry, "experiment_identifier", o.ExperimentID)
	}
	if o.Version != "" || o.Configuration != "" {
		p := b.strDataset(entry, "program_name", "h5ingest")
		if o.Version != "" {
			b.attr(p, "version", o.Version)
		}
		if o.Configuration != "" {
			b.attr(p, "configuration", o.Configuration)
		}
		b.close(p)
	}
	if len(o.UserMetadata) > 0 {
		m, err := storedMap(o.UserMetadata)
		if err != nil {
			b.fail(err)
			return
		}
		b.collection(entry, "user_metadata", m)
	}
}

// CheckMetadataKey reports whether k can name an entry of the user
// metadata (Options.UserMetadata): an HDF5 link name, neither empty nor
// "." nor holding "/".
func CheckMetadataKey(k string) error {
	if k == "" || k == "." || strings.Contains(k, "/") {
		return fmt.Errorf("user metadata key %q: a key may be neither empty nor '.', nor hold '/'", k)
	}
	return nil
}

// ParseMetadata turns KEY=VALUE pairs, as a command line gives them, into
// user metadata (Options.UserMetadata). A VALUE that is one JSON value
// keeps its JSON type: a whole number within 64 bits (no fraction, no
// exponent) is an integer, any other number a float64, true and false
// booleans, an object a map, a quoted string the string inside the
// quotes; an array is kept as its JSON text. Any other VALUE (a bare
// word, 0042, null, a whole number beyond 64 bits, nothing) is kept as
// the text given. No pairs give nil.
func ParseMetadata(pairs []string) (map[string]any, error) {
	if len(pairs) == 0 {
		return nil, nil
	}
	m := map[string]any{}
	for _, kv := range pairs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, fmt.Errorf("%q: want KEY=VALUE", kv)
		}
		if err := CheckMetadataKey(k); err != nil {
			return nil, fmt.Errorf("%q: %w", kv, err)
		}
		var x any = v
		if json.Valid([]byte(v)) {
			dec := json.NewDecoder(strings.NewReader(v))
			dec.UseNumber()
			var j any
			if err := dec.Decode(&j); err == nil && j != nil {
				x = j
			}
		}
		s, err := storedValue(x)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", kv, err)
		}
		m[k] = s
	}
	return m, nil
}

// storedMap returns m with every value as a file keeps it (storedValue),
// its keys checked.
func storedMap(m map[string]any) (map[string]any, error) {
	out := make(map[string]any, len(m))
	for k, v := range m {
		if err := CheckMetadataKey(k); err != nil {
			return nil, err
		}
		s, err := storedValue(v)
		if err != nil {
			return nil, fmt.Errorf("user metadata key %q: %w", k, err)
		}
		out[k] = s
	}
	return out, nil
}

// storedValue returns v as a file keeps it: a string, an int64 (a uint64
// above int64's range), a float64, a bool, a map of such values, or the
// JSON text of anything else (an array, null). A json.Number is an int64
// where it is a whole number within 64 bits, its text where it is a whole
// number beyond, else a float64.
func storedValue(v any) (any, error) {
	switch v := v.(type) {
	case string, bool, float64, int64:
		return v, nil
	case float32:
		return float64(v), nil
	case int:
		return int64(v), nil
	case int8:
		return int64(v), nil
	case int16:
		return int64(v), nil
	case int32:
		return int64(v), nil
	case uint8:
		return int64(v), nil
	case uint16:
		return int64(v), nil
	case uint32:
		return int64(v), nil
	case uint:
		return storedUint(uint64(v)), nil
	case uint64:
		return storedUint(v), nil
	case json.Number:
		return storedNumber(v), nil
	case map[string]any:
		return storedMap(v)
	}
	text, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return string(text), nil
}

func storedUint(u uint64) any {
	if u > math.MaxInt64 {
		return u
	}
	return int64(u)
}

func storedNumber(n json.Number) any {
	if i, err := n.Int64(); err == nil {
		return i
	}
	if u, err := strconv.ParseUint(n.String(), 10, 64); err == nil {
		return u
	}
	if !strings.ContainsAny(n.String(), ".eE") {
		return n.String() // a whole number beyond 64 bits: its digits, not a rounded float
	}
	if f, err := n.Float64(); err == nil {
		return f
	}
	return n.String()
}

// collection writes m, whose values are as storedValue returns them, as
// an NXcollection named name in loc, keys in order.
func (b *Builder) collection(loc hid, name string, m map[string]any) {
	g := b.group(loc, name, "NXcollection")
	for _, k := range slices.Sorted(maps.Keys(m)) {
		switch v := m[k].(type) {
		case string:
			b.str(g, k, v)
		case float64:
			b.scalarF64(g, k, v, "")
		case int64:
			b.close(b.scalar(g, k, kindI64, unsafe.Pointer(&v)))
		case uint64:
			b.close(b.scalar(g, k, kindU64, unsafe.Pointer(&v)))
		case bool:
			b.boolean(g, k, v)
		case map[string]any:
			b.collection(g, k, v)
		default:
			b.fail(fmt.Errorf("user metadata key %q: value %v of type %T", k, v, v))
		}
	}
}

// boolean creates a scalar boolean dataset, as h5py keeps numpy's bool.
func (b *Builder) boolean(loc hid, name string, v bool) {
	if b.err != nil {
		return
	}
	t, err := boolType()
	if err != nil {
		b.fail(err)
		return
	}
	defer closeID(t)
	var x int8
	if v {
		x = 1
	}
	d := b.dataset(loc, name, 0, t, nil, nil, dcpl{})
	b.write(d, name, 0, t, unsafe.Pointer(&x))
	b.close(d)
}

// entry returns the path of the file's entry: where the scan's metadata
// is.
func (r *Reader) entry() string {
	switch r.Layout {
	case LayoutNXtomo:
		return "/entry"
	case LayoutCXI:
		return "/entry_1"
	}
	return path.Dir(r.det)
}

// Metadata reads what the file says of its scan: the title, the sample's
// name, the experiment, the user metadata and the start and end times.
// What the file lacks is left zero.
func (r *Reader) Metadata() (Metadata, error) {
	var m Metadata
	e := r.entry()
	sample := []string{e + "/sample/name", e + "/sample_1/name"}
	for _, f := range []struct {
		paths []string
		dst   *string
	}{{[]string{e + "/title"}, &m.Title}, {sample, &m.SampleName}, {[]string{e + "/experiment_identifier"}, &m.ExperimentID}} {
		for _, p := range f.paths {
			if !exists(r.file, p) {
				continue
			}
			s, err := r.readString(p)
			if err != nil {
				return Metadata{}, err
			}
			*f.dst = s
			break
		}
	}
	for _, t := range []struct {
		name string
		dst  *time.Time
	}{{"start_time", &m.StartTime}, {"end_time", &m.EndTime}} {
		p := e + "/" + t.name
		if !exists(r.file, p) {
			continue
		}
		s, err := r.readString(p)
		if err != nil {
			return Metadata{}, err
		}
		if *t.dst, err = time.Parse(time.RFC3339Nano, s); err != nil {
			return Metadata{}, fmt.Errorf("metadata of %s: %s: %w", r.path, p, err)
		}
	}
	if p := e + "/user_metadata"; exists(r.file, p) {
		u, err := r.readCollection(p)
		if err != nil {
			return Metadata{}, fmt.Errorf("metadata of %s: %w", r.path, err)
		}
		m.UserMetadata = u
	}
	return m, nil
}

// readString reads the string dataset at p.
func (r *Reader) readString(p string) (string, error) {
	v, err := readValue(r.file, p)
	if err != nil {
		return "", fmt.Errorf("metadata of %s: %w", r.path, err)
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("metadata of %s: %s is not a string", r.path, p)
	}
	return s, nil
}

// readCollection reads the group at p as user metadata: a dataset as its
// value (readValue), a group as a map.
func (r *Reader) readCollection(p string) (map[string]any, error) {
	g, err := openGroup(r.file, p)
	if err != nil {
		return nil, err
	}
	defer closeID(g)
	names, err := linkNames(g, p)
	if err != nil {
		return nil, err
	}
	m := make(map[string]any, len(names))
	for _, name := range names {
		sub := p + "/" + name
		group, err := isGroup(r.file, sub)
		if err != nil {
			return nil, err
		}
		if group {
			m[name], err = r.readCollection(sub)
		} else {
			m[name], err = readValue(r.file, sub)
		}
		if err != nil {
			return nil, fmt.Errorf("user metadata %s: %w", sub, err)
		}
	}
	return m, nil
}
