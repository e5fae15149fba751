package fi

import (
	"slices"
	"testing"
)

func TestProviders(t *testing.T) {
	have := Providers("127.0.0.1:7100")
	if !slices.Contains(have, "tcp") {
		t.Errorf("providers %v: no tcp, which every libfabric has", have)
	}
	for _, p := range have {
		if !slices.Contains(knownProviders, p) {
			t.Errorf("provider %q is not one asked about", p)
		}
	}
	if n := OpenObjects(); n != 0 {
		t.Errorf("%d libfabric objects left open", n)
	}
}
