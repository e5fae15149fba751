// Package config loads beamline profiles: the settings a beamline keeps
// once and reuses for every scan.
//
// Values are layered, each layer overriding the one before: built-in
// defaults, then the profile file (YAML), then the environment
// (H5INGEST_SECTION_KEY, for example H5INGEST_DETECTOR_DISTANCE_M). Every key
// has a default, unknown keys are errors, and every value is checked before a
// scan starts; errors name the key and the file.
package config

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/viper"
)

// EnvPrefix starts the name of every environment variable that overrides a
// profile key.
const EnvPrefix = "H5INGEST"

// Profile is a beamline profile.
type Profile struct {
	Name        string   `mapstructure:"name"`        // short name, e.g. "cateretê-tomo"
	Description string   `mapstructure:"description"` // one line for people
	Detector    Detector `mapstructure:"detector"`
}

// Detector holds what the profile says about the detector.
type Detector struct {
	// ChipOrientation is each chip's rotation in the module image, 0 or 180
	// degrees, in chip-major order; empty means every chip at 0.
	ChipOrientation []int `mapstructure:"chip_orientation"`
	// PixelSize is the pixel pitch in metres (55 µm for Medipix3RX).
	PixelSize float64 `mapstructure:"pixel_size_m"`
	// Distance is the sample-detector distance in metres.
	Distance float64 `mapstructure:"distance_m"`
}

// Default returns the built-in defaults: one Pi-mega module at 55 µm pitch.
func Default() Profile {
	return Profile{
		Name:        "default",
		Description: "one simulated Pi-mega module",
		Detector: Detector{
			ChipOrientation: []int{},
			PixelSize:       55e-6,
			Distance:        1.0,
		},
	}
}

// Key describes one profile key, for validation and documentation.
type Key struct {
	Name string // dotted path, e.g. "detector.pixel_size_m"
	Help string // what the key means, with its unit
}

// Keys lists every profile key, in documentation order.
var Keys = []Key{
	{"name", "short name of the profile"},
	{"description", "one line describing the profile for people"},
	{"detector.chip_orientation", "rotation of each chip in the module image, 0 or 180 degrees, chip-major order; empty: all 0"},
	{"detector.pixel_size_m", "pixel pitch in metres"},
	{"detector.distance_m", "sample-detector distance in metres"},
}

// Load returns the profile in file path layered over the defaults, with the
// environment on top. An empty path means the defaults and the environment
// alone.
func Load(path string) (Profile, error) {
	v := viper.New()
	if err := v.MergeConfigMap(toMap(Default())); err != nil {
		return Profile{}, fmt.Errorf("built-in defaults: %w", err)
	}
	source := "built-in defaults"
	if path != "" {
		source = "profile " + path
		f, err := os.Open(path)
		if err != nil {
			return Profile{}, fmt.Errorf("%s: %w", source, err)
		}
		defer f.Close()
		file := viper.New()
		file.SetConfigType("yaml")
		if err := file.ReadConfig(f); err != nil {
			return Profile{}, fmt.Errorf("%s: not valid YAML: %w", source, err)
		}
		if err := checkKeys(file.AllKeys()); err != nil {
			return Profile{}, fmt.Errorf("%s: %w", source, err)
		}
		if err := v.MergeConfigMap(file.AllSettings()); err != nil {
			return Profile{}, fmt.Errorf("%s: %w", source, err)
		}
	}
	if err := applyEnv(v); err != nil {
		return Profile{}, err
	}
	var p Profile
	err := v.UnmarshalExact(&p, func(c *mapstructure.DecoderConfig) {
		c.WeaklyTypedInput = false
		c.DecodeHook = nil
	})
	if err != nil {
		return Profile{}, fmt.Errorf("%s: %w", source, typeError(err))
	}
	if err := p.Validate(); err != nil {
		return Profile{}, fmt.Errorf("%s: %w", source, err)
	}
	return p, nil
}

// checkKeys reports the first key that the schema does not know.
func checkKeys(keys []string) error {
	for _, k := range keys {
		if !slices.ContainsFunc(Keys, func(key Key) bool { return key.Name == k }) {
			return fmt.Errorf("unknown key %q (known keys: %s)", k, keyNames())
		}
	}
	return nil
}

func keyNames() string {
	names := make([]string, len(Keys))
	for i, k := range Keys {
		names[i] = k.Name
	}
	return strings.Join(names, ", ")
}

// applyEnv overrides keys from H5INGEST_SECTION_KEY variables. Values are
// YAML scalars or flow sequences ("[0, 180, 0]").
func applyEnv(v *viper.Viper) error {
	for _, k := range Keys {
		name := EnvPrefix + "_" + strings.ToUpper(strings.ReplaceAll(k.Name, ".", "_"))
		s, ok := os.LookupEnv(name)
		if !ok {
			continue
		}
		env := viper.New()
		env.SetConfigType("yaml")
		doc := nest(k.Name, s)
		if err := env.ReadConfig(strings.NewReader(doc)); err != nil {
			return fmt.Errorf("environment %s=%q: %w", name, s, err)
		}
		if err := v.MergeConfigMap(env.AllSettings()); err != nil {
			return fmt.Errorf("environment %s: %w", name, err)
		}
	}
	return nil
}

// nest returns a YAML document setting the dotted key to the scalar text s.
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

// typeError rewrites a decoding error so that it names the key and the
// expected type in plain words.
func typeError(err error) error {
	var de *mapstructure.DecodeError
	if errors.As(err, &de) {
		return fmt.Errorf("key %s: %v", de.Name(), de.Unwrap())
	}
	return err
}

// Validate reports the first value that is out of range.
func (p *Profile) Validate() error {
	d := p.Detector
	for i, deg := range d.ChipOrientation {
		if deg != 0 && deg != 180 {
			return fmt.Errorf("key detector.chip_orientation[%d]: %d degrees, want 0 or 180", i, deg)
		}
	}
	if !(d.PixelSize > 0 && d.PixelSize < 1e-2) {
		return fmt.Errorf("key detector.pixel_size_m: %g, want a pitch in metres above 0 and below 0.01", d.PixelSize)
	}
	if !(d.Distance >= 0 && d.Distance < 1000) {
		return fmt.Errorf("key detector.distance_m: %g, want metres from 0 to 1000", d.Distance)
	}
	return nil
}

// toMap turns a profile into the nested map viper merges.
func toMap(p Profile) map[string]any {
	return map[string]any{
		"name":        p.Name,
		"description": p.Description,
		"detector": map[string]any{
			"chip_orientation": p.Detector.ChipOrientation,
			"pixel_size_m":     p.Detector.PixelSize,
			"distance_m":       p.Detector.Distance,
		},
	}
}
