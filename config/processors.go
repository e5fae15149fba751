package config

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/go-viper/mapstructure/v2"
)

// Processor is one entry of output.processors: the name of a registered
// processor and the options it takes. A profile writes an entry as the
// name alone, or as a map with the name and the options beside it:
//
//	processors: [mask, {name: flatfield, bin: 4, to: dataset}]
//
// The options are the processor's own; config only keeps them, and
// Decode checks them against the processor's option struct.
type Processor struct {
	Name    string
	Options map[string]any // the entry's keys other than name; nil for none
}

// value returns the entry as a profile file holds it: the name alone
// where it has no options.
func (p Processor) value() any {
	if len(p.Options) == 0 {
		return p.Name
	}
	m := maps.Clone(p.Options)
	m["name"] = p.Name
	return m
}

// String returns the entry as "h5ingest profiles show" prints it:
// flatfield, or {name: flatfield, bin: 4} with the options in key order.
func (p Processor) String() string {
	if len(p.Options) == 0 {
		return p.Name
	}
	parts := []string{"name: " + p.Name}
	for _, k := range slices.Sorted(maps.Keys(p.Options)) {
		parts = append(parts, fmt.Sprintf("%s: %v", k, p.Options[k]))
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// processorType is the type decodeProcessor makes.
var processorType = reflect.TypeFor[Processor]()

// decodeProcessor is the decode hook that turns an entry of
// output.processors, a name or a map with a name, into a Processor.
func decodeProcessor(from, to reflect.Type, data any) (any, error) {
	if to != processorType {
		return data, nil
	}
	switch v := data.(type) {
	case string:
		return Processor{Name: v}, nil
	case map[string]any:
		name, ok := v["name"].(string)
		if !ok || name == "" {
			return nil, errors.New("a processor with options is a map with its name under name, e.g. {name: flatfield, bin: 4}")
		}
		p := Processor{Name: name}
		if len(v) > 1 {
			p.Options = maps.Clone(v)
			delete(p.Options, "name")
		}
		return p, nil
	case Processor:
		return v, nil
	}
	return nil, fmt.Errorf("%v: a processor is its name or a map with its name and options", data)
}

// Decode sets the options of entry index of output.processors into dst,
// a pointer to the processor's option struct holding its defaults, whose
// fields carry mapstructure tags. An option dst has no field for, or a
// value of the wrong type, is an error that names the key
// (output.processors[1].bins) and, for an unknown one, the options the
// processor knows.
func (p Processor) Decode(index int, dst any) error {
	key := fmt.Sprintf("output.processors[%d]", index)
	if len(p.Options) == 0 {
		return nil
	}
	if dst == nil {
		return bad(key, "processor %s takes no options, and the entry sets %s", p.Name, strings.Join(slices.Sorted(maps.Keys(p.Options)), ", "))
	}
	known := optionNames(dst)
	for _, k := range slices.Sorted(maps.Keys(p.Options)) {
		if !slices.Contains(known, k) {
			return bad(key+"."+k, "unknown option of processor %s (it knows %s)", p.Name, OneOf(known))
		}
	}
	dec, err := mapstructure.NewDecoder(&mapstructure.DecoderConfig{
		Result:      dst,
		ErrorUnused: true,
		DecodeHook:  mapstructure.ComposeDecodeHookFunc(mapstructure.StringToTimeDurationHookFunc(), durationUnits, wholeNumbers),
	})
	if err != nil {
		return fmt.Errorf("processor %s: %w", p.Name, err)
	}
	if err := dec.Decode(p.Options); err != nil {
		var de *mapstructure.DecodeError
		if errors.As(err, &de) {
			return bad(key+"."+de.Name(), "%v", de.Unwrap())
		}
		return bad(key, "%v", err)
	}
	return nil
}

// optionNames returns the mapstructure names of the fields of the struct
// dst points to.
func optionNames(dst any) []string {
	t := reflect.TypeOf(dst)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("mapstructure"), ",")
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		if name != "-" {
			out = append(out, name)
		}
	}
	return out
}

// validateProcessors checks each entry against its processor, where names
// says how.
func (p *Profile) validateProcessors(names Names) error {
	if names.CheckProcessor == nil {
		return nil
	}
	for i, proc := range p.Output.Processors {
		if err := names.CheckProcessor(i, proc); err != nil {
			return err
		}
	}
	return nil
}
