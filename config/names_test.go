package config

import (
	"strings"
	"testing"
)

// TestStagePropertiesFromNames checks that what a profile may ask of a
// codec and a backend comes from the names a registry gives, not from
// h5ingest's own stages: a facility's codec takes the levels and the live
// stream its entry allows, and a backend that cannot transpose is refused
// with backend_shuffle.
func TestStagePropertiesFromNames(t *testing.T) {
	names := testNames
	names.Codecs = append(names.Codecs[:len(names.Codecs):len(names.Codecs)], "zstd")
	names.CodecInfo = map[string]CodecInfo{"zstd": {MinLevel: -7, MaxLevel: 30, Stream: true}, "bslz4": {Transpose: true}}
	names.Backends = append(names.Backends[:len(names.Backends):len(names.Backends)], "fpga")
	names.Transposers = []string{"cpu"}
	for _, tc := range []struct {
		name, text, want string // want "": loads
	}{
		{"zstd at level 30", "output:\n  compression: zstd\n  level: 30\n", ""},
		{"zstd at a negative level", "output:\n  compression: zstd\n  level: -7\n", ""},
		{"zstd beyond", "output:\n  compression: zstd\n  level: 31\n", "key output.level: 31 with zstd, want 0 (default) or -7 to 30"},
		{"zstd streamed", "output:\n  compression: zstd\nstream:\n  address: tcp://127.0.0.1:31001\n", ""},
		{"bslz4 not streamed here", "stream:\n  address: tcp://127.0.0.1:31001\n",
			"key stream.address: set with output.compression bslz4, which Stream V2 cannot carry: want zstd"},
		{"shuffle on a backend that transposes", "backend: cpu\noutput:\n  backend_shuffle: true\n", ""},
		{"shuffle on one that does not", "backend: fpga\noutput:\n  backend_shuffle: true\n",
			"key output.backend_shuffle: true with backend fpga, which cannot do the bit transpose: want cpu, or false"},
		{"shuffle of a codec without", "backend: cpu\noutput:\n  compression: zstd\n  backend_shuffle: true\n",
			"key output.backend_shuffle: true with compression zstd, which has no bit transpose: want bslz4, or false"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := LoadLayers(Layers{Profile: writeProfile(t, tc.text), Names: names})
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
}
