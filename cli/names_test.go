package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"h5ingest/config"
)

// TestStageNamesAgree keeps every place that lists the stages a profile
// may name in step with the command's registry: profile validation, the
// flags' help, profiles show, profiles names and docs/profiles.md.
func TestStageNamesAgree(t *testing.T) {
	names := stages.Names()
	doc, err := os.ReadFile("../docs/profiles.md")
	if err != nil {
		t.Fatal(err)
	}
	_, help := runCaptured(t, "replay", "--help")
	_, show := runCaptured(t, "profiles", "show", "default")
	_, listed := runCaptured(t, "profiles", "names")
	flags := map[string]string{"backend": "--backend", "output.compression": "--compression", "output.layout": "--layout"}
	for _, k := range config.Keys {
		allowed, ok := names.Of(k.Name)
		if !ok {
			if names.Allowed(k.Name) != "" && !strings.Contains(string(doc), "| "+names.KeyHelp(k)+" |") {
				t.Errorf("docs/profiles.md: the row of %s does not say %q, what the registry's stages allow", k.Name, names.KeyHelp(k))
			}
			continue
		}
		want := names.KeyHelp(k)
		if row := "| `" + k.Name + "` |"; !strings.Contains(string(doc), row) || !strings.Contains(string(doc), want+" |") {
			t.Errorf("docs/profiles.md: the row of %s does not say %q", k.Name, want)
		}
		if flag, ok := flags[k.Name]; ok && !strings.Contains(help, want) {
			t.Errorf("replay --help: %s does not say %q", flag, want)
		}
		if line := lineWith(show, k.Name+" "); !strings.Contains(line, config.OneOf(allowed)) {
			t.Errorf("profiles show: %q does not name %s's choices %v", line, k.Name, allowed)
		}
		for _, name := range allowed {
			if !strings.Contains(listed, " "+name+" ") {
				t.Errorf("profiles names does not list %s", name)
			}
			if k.Name == "output.processors" {
				continue
			}
			path := writeKey(t, k.Name, name)
			if code, out := runCaptured(t, "profiles", "check", path); code != exitOK {
				t.Errorf("%s: %s: profile check refused a registered name: %s", k.Name, name, out)
			}
		}
		path := writeKey(t, k.Name, "not-registered")
		if code, _ := runCaptured(t, "profiles", "check", path); code != exitUsage {
			t.Errorf("%s: not-registered: profile check exit status %d, want %d", k.Name, code, exitUsage)
		}
	}
}

// writeKey writes a profile setting the dotted key to value and returns
// its path.
func writeKey(t *testing.T, key, value string) string {
	t.Helper()
	section, name, nested := strings.Cut(key, ".")
	text := key + ": " + value + "\n"
	if nested {
		if key == "output.processors" {
			value = "[" + value + "]"
		}
		text = section + ":\n  " + name + ": " + value + "\n"
	}
	path := filepath.Join(t.TempDir(), "p.yaml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
