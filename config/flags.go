package config

import (
	"fmt"
	"time"

	"github.com/spf13/pflag"
)

// A Flag is a command-line flag that sets a profile key: given on the
// command line, it is the top layer over the profile, the environment and
// the defaults (see Layers).
type Flag struct {
	Name string // the flag's name, without dashes: "compression"
	Key  string // the profile key it sets: "output.compression"
	Help string // its help; "" for the key's own, with the stage names it may take
}

// FlagSet is a set of flags that set profile keys.
type FlagSet struct {
	fs   *pflag.FlagSet
	keys map[string]string // flag name -> profile key
}

// NewFlagSet returns a FlagSet that defines its flags on fs.
func NewFlagSet(fs *pflag.FlagSet) *FlagSet {
	return &FlagSet{fs: fs, keys: map[string]string{}}
}

// Add defines each flag on the flag set, of its key's type (text, whole
// number, true or false, number or duration) with the built-in default
// as its default. names gives the stage names of the help of keys that
// name a stage. A key that is not a profile key of one of those types is
// a mistake in the program, and Add panics.
func (s *FlagSet) Add(names Names, flags ...Flag) {
	defaults := flatten(toMap(Default()))
	for _, f := range flags {
		k, ok := KeyNamed(f.Key)
		if !ok {
			panic("config: flag --" + f.Name + " sets no profile key " + f.Key)
		}
		help := f.Help + names.Allowed(f.Key)
		if f.Help == "" {
			help = names.KeyHelp(k)
		}
		switch d := defaults[f.Key].(type) {
		case string:
			s.fs.String(f.Name, d, help)
		case int:
			s.fs.Int(f.Name, d, help)
		case bool:
			s.fs.Bool(f.Name, d, help)
		case float64:
			s.fs.Float64(f.Name, d, help)
		case time.Duration:
			s.fs.Duration(f.Name, d, help)
		default:
			panic(fmt.Sprintf("config: flag --%s: key %s is a %T", f.Name, f.Key, d))
		}
		s.keys[f.Name] = f.Key
	}
}

// Bind makes the flag name, defined on the flag set already, set the
// profile key too.
func (s *FlagSet) Bind(name, key string) { s.keys[name] = key }

// Values returns the values of the flags that set a profile key and were
// given on the command line, by key, for Layers.Flags.
func (s *FlagSet) Values() (map[string]FlagValue, error) {
	values := map[string]FlagValue{}
	var err error
	s.fs.Visit(func(f *pflag.Flag) {
		key, ok := s.keys[f.Name]
		if !ok || err != nil {
			return
		}
		var v any
		if v, err = s.value(f); err == nil {
			values[key] = FlagValue{Flag: "--" + f.Name, Value: v}
		}
	})
	return values, err
}

// value returns a flag's value with its Go type.
func (s *FlagSet) value(f *pflag.Flag) (any, error) {
	switch f.Value.Type() {
	case "string":
		return s.fs.GetString(f.Name)
	case "int":
		return s.fs.GetInt(f.Name)
	case "bool":
		return s.fs.GetBool(f.Name)
	case "duration":
		return s.fs.GetDuration(f.Name)
	case "float64":
		return s.fs.GetFloat64(f.Name)
	}
	return nil, fmt.Errorf("--%s: flags of type %s cannot set a profile key", f.Name, f.Value.Type())
}
