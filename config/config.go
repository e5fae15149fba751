// Package config loads beamline profiles: the settings a beamline keeps
// once and reuses for every scan.
//
// Values are layered, each layer overriding the one before: built-in
// defaults, then the profile (a YAML file, or one of the profiles built into
// the binary), then the environment (H5INGEST_SECTION_KEY, for example
// H5INGEST_DETECTOR_DISTANCE_M), then command-line flags. Every key has a
// default, unknown keys are errors, and every value is checked before a scan
// starts; errors name the key, where its value came from and what is
// allowed.
package config

import (
	"errors"
	"fmt"
	"math"
	"os"
	"os/user"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/viper"
)

// EnvPrefix starts the name of every environment variable that overrides a
// profile key.
const EnvPrefix = "H5INGEST"

// Profile is a beamline profile.
type Profile struct {
	Name        string   `mapstructure:"name"`
	Description string   `mapstructure:"description"`
	Detector    Detector `mapstructure:"detector"`
	Source      Source   `mapstructure:"source"`
	Backend     string   `mapstructure:"backend"`
	Output      Output   `mapstructure:"output"`
	Plan        PlanKeys `mapstructure:"plan"`
	Status      Status   `mapstructure:"status"`
	Stream      Stream   `mapstructure:"stream"`
	Metadata    Metadata `mapstructure:"metadata"`
}

// Metadata describes the scan in its files, for the people and catalogues
// that find it later.
type Metadata struct {
	Title        string `mapstructure:"title"`                 // the entry's title; empty: the profile's description
	Sample       string `mapstructure:"sample"`                // the sample's name
	ExperimentID string `mapstructure:"experiment_identifier"` // proposal or experiment number
}

// Stream is the scan's live stream for online analysis: its images in the
// DECTRIS Stream V2 format, on a ZeroMQ PUSH socket (package stream).
type Stream struct {
	// Address is the endpoint the stream binds, tcp://HOST:PORT; empty
	// means off. In a scan of several modules, module i's stream binds
	// PORT+i.
	Address string  `mapstructure:"address"`
	Every   int     `mapstructure:"every"`    // send every Nth image; 1 each
	MaxRate float64 `mapstructure:"max_rate"` // at most this many images a second; 0 no limit
	Queue   int     `mapstructure:"queue"`    // images that may wait to be put in order and sent
	// MaxBytes bounds the queue's memory: queue times the largest chunk
	// (the image's bytes) must fit.
	MaxBytes int `mapstructure:"max_bytes"`
	// Linger is how long, after the scan's last image, the stream waits
	// for a connected consumer to take what is queued and the end message.
	Linger time.Duration `mapstructure:"linger"`
}

// Status is how people and programs watch a scan while it runs.
type Status struct {
	// Address serves the status page and Prometheus metrics: [HOST]:PORT,
	// or PORT alone for loopback; empty means off.
	Address string `mapstructure:"address"`
}

// Detector is what the profile says about the detector.
type Detector struct {
	Model      string   `mapstructure:"model"`
	Modules    []Module `mapstructure:"modules"`
	ChipsX     int      `mapstructure:"chips_x"`
	ChipsY     int      `mapstructure:"chips_y"`
	ChipWidth  int      `mapstructure:"chip_width"`
	ChipHeight int      `mapstructure:"chip_height"`
	// ChipOrientation is each chip's rotation in the module image, 0 or 180
	// degrees, in chip-major order; empty means every chip at 0.
	ChipOrientation []int   `mapstructure:"chip_orientation"`
	PixelSize       float64 `mapstructure:"pixel_size_m"`
	Distance        float64 `mapstructure:"distance_m"`
	Energy          float64 `mapstructure:"energy_ev"`
	Encoding        string  `mapstructure:"encoding"`
	BitDepth        int     `mapstructure:"bit_depth"`
	Coding          string  `mapstructure:"coding"`

	// What the live stream's start message tells consumers of the
	// detector's settings; 0 or empty where not known (left out).
	CountTime       float64   `mapstructure:"count_time_s"`        // exposure per image, seconds
	FrameTime       float64   `mapstructure:"frame_time_s"`        // time between the starts of two images, seconds
	BeamCenter      []float64 `mapstructure:"beam_center_px"`      // [x, y] where the direct beam would hit, pixels
	SensorMaterial  string    `mapstructure:"sensor_material"`     // such as Si, CdTe, GaAs
	SensorThickness float64   `mapstructure:"sensor_thickness_m"`  // metres
	Threshold       float64   `mapstructure:"threshold_energy_ev"` // the counting threshold, eV
	SerialNumber    string    `mapstructure:"serial_number"`       // the detector's serial number
}

// Module places one module of a detector array: the pixel offset of its top
// left corner in the array's image.
type Module struct {
	ID int `mapstructure:"id"`
	X  int `mapstructure:"x"`
	Y  int `mapstructure:"y"`
}

// Source is where frames come from in an acquisition.
type Source struct {
	Transport      string        `mapstructure:"transport"`
	Provider       string        `mapstructure:"provider"`
	Address        string        `mapstructure:"address"`
	Port           int           `mapstructure:"port"`
	Mode           string        `mapstructure:"mode"`
	ConnectTimeout time.Duration `mapstructure:"connect_timeout"`
	IdleTimeout    time.Duration `mapstructure:"idle_timeout"`
	RingSlots      int           `mapstructure:"ring_slots"`
	// RingMaxBytes caps the memory of one module's receive ring, bytes: a
	// profile whose ring_slots of its frames exceed it is refused.
	RingMaxBytes int `mapstructure:"ring_max_bytes"`
	// DropWhenFull is for a detector that cannot wait: frames arriving
	// while the pipeline is full are dropped, counted and recorded missing,
	// instead of holding the detector back.
	DropWhenFull bool `mapstructure:"drop_when_full"`
	// MaxFrameGap bounds a scan without a plan: a frame number more than
	// this beyond the highest received is rejected as out of range.
	MaxFrameGap int `mapstructure:"max_frame_gap"`

	// The keys of a transport over RDMA verbs with static queue pairs (a
	// detector front end writing with immediate data, source.transport
	// roce); the transport checks them.
	Device      string `mapstructure:"device"`       // RDMA device; empty: the first
	DevicePort  int    `mapstructure:"device_port"`  // its port, from 1
	GIDIndex    int    `mapstructure:"gid_index"`    // the port's GID table entry (RoCE v1 or v2)
	QPType      string `mapstructure:"qp_type"`      // rc or uc
	MTU         int    `mapstructure:"mtu"`          // path MTU, bytes
	Immediate   string `mapstructure:"immediate"`    // what a write's immediate data says: frame or slot
	FrameHeader string `mapstructure:"frame_header"` // what a slot holds: frame (header and payload) or none (payload alone)
	// WriteGuard is how many writes the front end may have under way
	// beyond the last completion seen: a frame is stored ok only if no
	// frame at or beyond its number plus ring_slots minus write_guard had
	// completed once it was read.
	WriteGuard int `mapstructure:"write_guard"`
	// FrontEnd is the front end's end of each module's queue pair, fixed
	// in its firmware: given here, no --front-end file is waited for.
	FrontEnd []FrontEnd `mapstructure:"front_end"`
}

// FrontEnd is a detector front end's end of one module's queue pair.
type FrontEnd struct {
	Module int    `mapstructure:"module"` // the module's id
	GID    string `mapstructure:"gid"`    // the front end's GID, an IPv6 address (an IPv4-mapped one for RoCE v2 over IPv4)
	QPN    int    `mapstructure:"qpn"`    // its queue pair number
	PSN    int    `mapstructure:"psn"`    // the first packet sequence number it sends
	MAC    string `mapstructure:"mac"`    // its MAC address, for people: the kernel finds it from the GID
}

// Output is where and how scans are written.
type Output struct {
	Directory     string        `mapstructure:"directory"`
	Template      string        `mapstructure:"template"`
	Layout        string        `mapstructure:"layout"`
	Compression   string        `mapstructure:"compression"`
	Level         int           `mapstructure:"level"`
	FlushInterval time.Duration `mapstructure:"flush_interval"`
	Overwrite     bool          `mapstructure:"overwrite"`
	// BackendShuffle moves the bit transpose of bslz4 and bszstd to the
	// decode backend (on the GPU with cuda), leaving the CPU only the block
	// compression. The files do not change.
	BackendShuffle bool `mapstructure:"backend_shuffle"`
	// Processors are the processor stages every decoded image goes
	// through, in order, before compression: each a name, or a name with
	// the processor's options.
	Processors []Processor `mapstructure:"processors"`
	// FileMode and FileGroup are the permission bits and the owner group
	// the scan's files (each module's and the master) get as they are
	// made, so that the beamline's users can read what a service writes
	// under a strict umask; empty: as the process makes them. The
	// operator's, never a request's (see Access).
	FileMode  FileMode `mapstructure:"file_mode"`
	FileGroup string   `mapstructure:"file_group"`
}

// FileMode is a file's permission bits written in octal, as chmod takes
// them: "0640". A YAML number written with a leading 0 (0640, which YAML
// reads as octal) is taken too.
type FileMode string

// Access returns the permission bits and the group id o gives the scan's
// files: mode 0 where o sets none, gid -1 where o sets no group. o must
// be valid (Validate).
func (o Output) Access() (mode os.FileMode, gid int, err error) {
	gid = -1
	if o.FileMode != "" {
		digits := strings.TrimPrefix(strings.TrimPrefix(string(o.FileMode), "0o"), "0O")
		m, err := strconv.ParseUint(digits, 8, 32)
		if err != nil || m > 0o777 || m == 0 {
			return 0, -1, bad("output.file_mode", "%q, want permission bits in octal such as \"0640\" (owner read-write, group read) or \"0644\" (everyone read)", o.FileMode)
		}
		mode = os.FileMode(m)
	}
	if o.FileGroup != "" {
		g, err := lookupGroup(o.FileGroup)
		if err != nil {
			return 0, -1, bad("output.file_group", "%q: %v", o.FileGroup, err)
		}
		gid = g
	}
	return mode, gid, nil
}

// lookupGroup returns the id of the group named name, or numbered so.
func lookupGroup(name string) (int, error) {
	g, err := user.LookupGroup(name)
	if err != nil {
		if _, numeric := strconv.Atoi(name); numeric != nil {
			return 0, fmt.Errorf("no such group on this host")
		}
		if g, err = user.LookupGroupId(name); err != nil {
			return 0, fmt.Errorf("no group of that id on this host")
		}
	}
	return strconv.Atoi(g.Gid)
}

// fileModeKey is output.file_mode, whose value is taken as the text a
// file or the environment writes: YAML reads an unquoted 440 as the
// decimal number 440 (mode 0670, group-writable), and 0640 as 416.
const fileModeKey = "output.file_mode"

// octalModes takes a number for a FileMode (one given in Go, as a flag
// or a layer of code sets it) as the mode it is: 0o640 is mode 0640.
func octalModes(from, to reflect.Type, data any) (any, error) {
	if to != reflect.TypeFor[FileMode]() {
		return data, nil
	}
	switch v := reflect.ValueOf(data); from.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return FileMode(fmt.Sprintf("%#o", v.Int())), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return FileMode(fmt.Sprintf("%#o", v.Uint())), nil
	}
	return data, nil
}

// PlanKeys are a profile's scan plan defaults.
type PlanKeys struct {
	Darks       int     `mapstructure:"darks"`
	Flats       int     `mapstructure:"flats"`
	Projections int     `mapstructure:"projections"`
	AngleStart  float64 `mapstructure:"angle_start"`
	AngleEnd    float64 `mapstructure:"angle_end"`
	// Sequence, when set, gives the frames' order and counts, for example
	// "flats:20,darks:10,projections:1800,flats:20"; it replaces darks,
	// flats and projections.
	Sequence string `mapstructure:"sequence"`
	// Positions names a CSV file of the sample's scan positions (x, y[, z]
	// in metres, one line per frame) for ptychography; empty: none.
	Positions string `mapstructure:"positions"`
}

// Source names of a value, as Sources reports them.
const (
	FromDefault = "default"
)

// Sources maps each key to where its value came from: FromDefault, "profile
// NAME", "environment H5INGEST_...", or "flag --NAME".
type Sources map[string]string

// Layers are the layers above the built-in defaults.
type Layers struct {
	// Profile is a profile file's path or the name of a built-in profile;
	// empty means none.
	Profile string
	// Flags are values given on the command line, by key, with the flag
	// that gave each (for messages); they override everything else.
	Flags map[string]FlagValue
	// Names are the stages the keys that name one may choose from: a
	// registry's (package registry).
	Names Names
}

// FlagValue is a key's value from a command-line flag, or from what
// takes the command line's place (a request to the scan service).
type FlagValue struct {
	Flag  string // e.g. "--compression"
	Value any
	// From, where set, names where the value came from in messages in
	// place of "flag FLAG", e.g. `request overrides."output.level"`.
	From string
}

// source names where the value came from, for messages.
func (fv FlagValue) source() string {
	if fv.From != "" {
		return fv.From
	}
	return "flag " + fv.Flag
}

// Load returns the profile at path (a file, or a built-in profile's name)
// layered over the defaults, with the environment on top, its keys that
// name a stage checked against names. An empty path means the defaults
// and the environment alone.
func Load(path string, names Names) (Profile, error) {
	p, _, err := LoadLayers(Layers{Profile: path, Names: names})
	return p, err
}

// LoadLayers layers defaults, profile, environment and flags, checks the
// result and returns it with where each value came from.
func LoadLayers(l Layers) (Profile, Sources, error) {
	values := flatten(toMap(Default()))
	sources := Sources{}
	for k := range values {
		sources[k] = FromDefault
	}
	where := "built-in defaults"
	var doc profileDoc // the profile file's, for the lines its keys stand on
	// located names where the value behind err came from, with its line
	// where that is the profile file.
	located := func(err error) string {
		s := errorSource(err, sources, where)
		var ke *keyError
		var ue *unknownKeyError
		switch {
		case s != where:
		case errors.As(err, &ke):
			return at(s, doc.line(ke.key))
		case errors.As(err, &ue):
			return at(s, doc.line(ue.key))
		}
		return s
	}
	if l.Profile != "" {
		text, name, err := readProfile(l.Profile)
		if err != nil {
			return Profile{}, nil, err
		}
		where = "profile " + name
		if doc, err = parseDoc(text); err != nil {
			var se *syntaxError
			errors.As(err, &se)
			return Profile{}, nil, fmt.Errorf("%s: not valid YAML: %w", at(where, se.line), err)
		}
		file, err := parseYAML(text)
		if err != nil {
			return Profile{}, nil, fmt.Errorf("%s: not valid YAML: %w", where, err)
		}
		if mode, ok := doc.scalar(fileModeKey); ok {
			file[fileModeKey] = mode // its octal digits as written, not YAML's number
		}
		if err := mergeLayer(values, sources, file, where); err != nil {
			return Profile{}, nil, fmt.Errorf("%s: %w", located(err), err)
		}
	}
	if err := mergeEnv(values, sources); err != nil {
		return Profile{}, nil, err
	}
	for key, fv := range l.Flags {
		if findKey(key) == nil {
			return Profile{}, nil, fmt.Errorf("%s sets unknown key %q", fv.source(), key)
		}
		values[key] = fv.Value
		sources[key] = fv.source()
	}
	p, err := decode(values)
	if err != nil {
		return Profile{}, nil, fmt.Errorf("%s: %w", located(err), err)
	}
	if err := p.Validate(l.Names); err != nil {
		return Profile{}, nil, fmt.Errorf("%s: %w", located(err), err)
	}
	return p, sources, nil
}

// readProfile returns the text of a built-in profile or a file, and the name
// to use in messages.
func readProfile(ref string) ([]byte, string, error) {
	if text, ok := BuiltinText(ref); ok {
		return text, ref + " (built in)", nil
	}
	text, err := os.ReadFile(ref)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) && !strings.ContainsAny(ref, "/.") {
			return nil, "", fmt.Errorf("profile %q: no such file, and no built-in profile of that name (built in: %s)",
				ref, strings.Join(BuiltinNames(), ", "))
		}
		return nil, "", fmt.Errorf("profile %s: %w", ref, err)
	}
	return text, ref, nil
}

// parseYAML reads a YAML document into a flat map of dotted keys.
func parseYAML(text []byte) (map[string]any, error) {
	v := viper.New()
	v.SetConfigType("yaml")
	if err := v.ReadConfig(strings.NewReader(string(text))); err != nil {
		return nil, err
	}
	out := map[string]any{}
	for _, k := range v.AllKeys() {
		out[k] = v.Get(k)
	}
	return out, nil
}

// mergeLayer sets the layer's values over values, checking every key.
func mergeLayer(values map[string]any, sources Sources, layer map[string]any, where string) error {
	keys := make([]string, 0, len(layer))
	for k := range layer {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if findKey(k) == nil {
			return &unknownKeyError{key: k}
		}
		values[k] = layer[k]
		sources[k] = where
	}
	return nil
}

// suggest names the known keys of the unknown key's section, or the
// sections.
func suggest(key string) string {
	section, _, nested := strings.Cut(key, ".")
	var same []string
	for _, k := range Keys {
		if s, _, ok := strings.Cut(k.Name, "."); nested && ok && s == section {
			same = append(same, k.Name)
		}
	}
	if len(same) > 0 {
		return " (known keys in " + section + ": " + strings.Join(same, ", ") + ")"
	}
	var top []string // in the order Keys lists them
	for _, k := range Keys {
		if s, _, _ := strings.Cut(k.Name, "."); !slices.Contains(top, s) {
			top = append(top, s)
		}
	}
	return " (known sections and keys: " + strings.Join(top, ", ") + ")"
}

// testEnvPrefix starts the variables of h5ingest's own test suite, which
// are not profile keys.
const testEnvPrefix = EnvPrefix + "_TEST_"

// mergeEnv applies H5INGEST_SECTION_KEY variables. Values are YAML scalars
// or flow sequences ("[0, 180, 0]"). A variable with the prefix that names
// no key is an error: a misspelt setting must not be ignored.
func mergeEnv(values map[string]any, sources Sources) error {
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, EnvPrefix+"_") || strings.HasPrefix(name, testEnvPrefix) || envKey(name) != "" {
			continue
		}
		return fmt.Errorf("environment %s: no such key%s", name, suggestEnv(name))
	}
	for _, k := range Keys {
		name := EnvName(k.Name)
		s, ok := os.LookupEnv(name)
		if !ok {
			continue
		}
		layer, err := parseYAML([]byte(nest(k.Name, s)))
		if err != nil {
			return fmt.Errorf("environment %s=%q: %w", name, s, err)
		}
		if k.Name == fileModeKey {
			layer[k.Name] = strings.TrimSpace(s) // its octal digits as written
		}
		if err := mergeLayer(values, sources, layer, "environment "+name); err != nil {
			return err
		}
	}
	return nil
}

// envKey returns the key the environment variable name overrides, or "".
func envKey(name string) string {
	for _, k := range Keys {
		if EnvName(k.Name) == name {
			return k.Name
		}
	}
	return ""
}

// suggestEnv names the variables of the unknown variable's section, or the
// sections.
func suggestEnv(name string) string {
	rest := strings.TrimPrefix(name, EnvPrefix+"_")
	var same []string
	for _, k := range Keys {
		section, _, nested := strings.Cut(k.Name, ".")
		if nested && strings.HasPrefix(rest, strings.ToUpper(section)+"_") {
			same = append(same, EnvName(k.Name))
		}
	}
	if len(same) > 0 {
		return " (known in its section: " + strings.Join(same, ", ") + ")"
	}
	return " (known sections: NAME, DESCRIPTION, BACKEND, DETECTOR, SOURCE, OUTPUT, PLAN, STATUS)"
}

// EnvName returns the environment variable that overrides key.
func EnvName(key string) string {
	return EnvPrefix + "_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

// nest returns a YAML document setting the dotted key to the text s.
func nest(key, s string) string {
	var b strings.Builder
	parts := strings.Split(key, ".")
	for i, p := range parts {
		b.WriteString(strings.Repeat("  ", i))
		b.WriteString(p)
		b.WriteString(":")
		if i < len(parts)-1 {
			b.WriteString("\n")
		}
	}
	b.WriteString(" ")
	b.WriteString(s)
	b.WriteString("\n")
	return b.String()
}

// keyError is an error about one key's value.
type keyError struct {
	key string
	msg string
}

func (e *keyError) Error() string { return "key " + e.key + ": " + e.msg }

// unknownKeyError is a key that no profile holds, set by a profile file.
type unknownKeyError struct{ key string }

func (e *unknownKeyError) Error() string {
	return fmt.Sprintf("unknown key %q%s", e.key, suggest(e.key))
}

// errorSource names where the value behind err came from.
func errorSource(err error, sources Sources, fallback string) string {
	var ke *keyError
	if errors.As(err, &ke) {
		base, _, _ := strings.Cut(ke.key, "[")
		// A value left at its default is wrong only with the keys the
		// upper layers set: name the uppermost layer then.
		if s, ok := sources[base]; ok && s != FromDefault {
			return s
		}
	}
	return fallback
}

// decode turns the flat values into a Profile, strictly: values must have
// the key's type, and list entries may hold only known fields.
func decode(values map[string]any) (Profile, error) {
	var p Profile
	dec, err := mapstructure.NewDecoder(&mapstructure.DecoderConfig{
		Result:      &p,
		ErrorUnused: true,
		DecodeHook:  mapstructure.ComposeDecodeHookFunc(mapstructure.StringToTimeDurationHookFunc(), durationUnits, wholeNumbers, octalModes, decodeProcessor),
	})
	if err != nil {
		return p, err
	}
	if err := dec.Decode(unflatten(values)); err != nil {
		var de *mapstructure.DecodeError
		if errors.As(err, &de) {
			return p, &keyError{key: de.Name(), msg: de.Unwrap().Error()}
		}
		return p, err
	}
	return p, nil
}

// wholeNumbers refuses a number with a fraction for an integer key, which
// the decoder would otherwise cut ("darks: 1.5" is no count of frames).
func wholeNumbers(from, to reflect.Type, data any) (any, error) {
	switch to.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
	default:
		return data, nil
	}
	if f, ok := data.(float64); ok && (f != math.Trunc(f) || math.IsInf(f, 0)) {
		return nil, fmt.Errorf("%v, want a whole number", f)
	}
	return data, nil
}

// durationUnits refuses a bare number other than 0 for a duration key,
// which the decoder would otherwise take as nanoseconds ("wait: 5" is no
// five seconds): a duration is written with its unit, 5s or 200ms.
func durationUnits(from, to reflect.Type, data any) (any, error) {
	if d := reflect.TypeFor[time.Duration](); to != d || from == d {
		return data, nil
	}
	switch from.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		if v := reflect.ValueOf(data); !v.IsZero() {
			return nil, fmt.Errorf("%v, want a duration with its unit, such as 5s or 200ms", data)
		}
	}
	return data, nil
}

// flatten turns a nested map into dotted keys; lists are values.
func flatten(m map[string]any) map[string]any {
	out := map[string]any{}
	var walk func(prefix string, m map[string]any)
	walk = func(prefix string, m map[string]any) {
		for k, v := range m {
			if sub, ok := v.(map[string]any); ok {
				walk(prefix+k+".", sub)
				continue
			}
			out[prefix+k] = v
		}
	}
	walk("", m)
	return out
}

// unflatten turns dotted keys back into a nested map.
func unflatten(values map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range values {
		m := out
		parts := strings.Split(k, ".")
		for _, p := range parts[:len(parts)-1] {
			sub, ok := m[p].(map[string]any)
			if !ok {
				sub = map[string]any{}
				m[p] = sub
			}
			m = sub
		}
		m[parts[len(parts)-1]] = v
	}
	return out
}

// Values returns the profile as a profile file would hold it: a nested map
// by its keys, durations as text ("10s"), ready to encode as JSON or YAML
// and to load again.
func (p Profile) Values() map[string]any {
	m := toMap(p)
	var text func(m map[string]any)
	text = func(m map[string]any) {
		for k, v := range m {
			switch x := v.(type) {
			case map[string]any:
				text(x)
			case time.Duration:
				m[k] = x.String()
			}
		}
	}
	text(m)
	return m
}

// toMap turns a profile into a nested map with the profile's keys, through
// the same field tags that decode reads.
func toMap(p Profile) map[string]any {
	return structMap(reflect.ValueOf(p))
}

func structMap(v reflect.Value) map[string]any {
	out := map[string]any{}
	t := v.Type()
	for i := range t.NumField() {
		tag := t.Field(i).Tag.Get("mapstructure")
		f := v.Field(i)
		switch f.Kind() {
		case reflect.Struct:
			out[tag] = structMap(f)
		case reflect.Slice:
			if procs, ok := f.Interface().([]Processor); ok {
				list := make([]any, len(procs))
				for j, pr := range procs {
					list[j] = pr.value()
				}
				out[tag] = list
			} else if f.Type().Elem().Kind() == reflect.Struct {
				list := make([]any, f.Len())
				for j := range f.Len() {
					list[j] = structMap(f.Index(j))
				}
				out[tag] = list
			} else {
				out[tag] = f.Interface()
			}
		case reflect.String:
			out[tag] = f.String() // a FileMode as the text it is
		default:
			out[tag] = f.Interface()
		}
	}
	return out
}

// Text returns the value of each key of the profile as text, by key:
// strings quoted, lists in brackets, durations as Go writes them ("10s"),
// as "h5ingest profiles show" prints them.
func (p Profile) Text() map[string]string {
	out := map[string]string{}
	var walk func(prefix string, v reflect.Value)
	walk = func(prefix string, v reflect.Value) {
		t := v.Type()
		for i := range t.NumField() {
			name := prefix + t.Field(i).Tag.Get("mapstructure")
			f := v.Field(i)
			if f.Kind() == reflect.Struct {
				walk(name+".", f)
				continue
			}
			out[name] = text(f.Interface())
		}
	}
	walk("", reflect.ValueOf(p))
	return out
}

// text renders one key's value.
func text(v any) string {
	switch x := v.(type) {
	case string:
		return fmt.Sprintf("%q", x)
	case []Module:
		parts := make([]string, len(x))
		for i, m := range x {
			parts[i] = fmt.Sprintf("{id: %d, x: %d, y: %d}", m.ID, m.X, m.Y)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case []int:
		return strings.ReplaceAll(fmt.Sprint(x), " ", ", ")
	case []Processor:
		parts := make([]string, len(x))
		for i, p := range x {
			parts[i] = p.String()
		}
		return "[" + strings.Join(parts, ", ") + "]"
	}
	return fmt.Sprint(v)
}
