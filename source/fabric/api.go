package fabric

import (
	"fmt"
	"slices"
	"strings"

	"h5ingest/source/fabric/internal/fi"
)

// Error is a failed libfabric call: the operation and libfabric's error.
// Its Unwrap gives the errno, so that errors.Is(err, syscall.ECONNREFUSED)
// and the like work.
type Error = fi.Error

// OpenObjects returns how many libfabric objects, fi_info lists and
// registered-memory mappings the package holds open. A program that has
// closed everything it opened sees 0.
func OpenObjects() int { return fi.OpenObjects() }

// Providers returns the libfabric providers of this machine that can
// listen at addr, host:port, among those known by name; verbs is among
// them only where an RDMA device is.
func Providers(addr string) []string { return fi.Providers(addr) }

// CheckProvider reports whether libfabric's provider can listen at addr:
// where it cannot (verbs on a machine without RDMA), it names the
// providers that can, and suggests tcp.
func CheckProvider(provider, addr string) error {
	info, err := fi.GetInfo(provider, addr, true)
	if err == nil {
		info.Close()
		return nil
	}
	have := fi.Providers(addr)
	list := "none"
	if len(have) > 0 {
		list = strings.Join(have, ", ")
	}
	hint := ""
	if slices.Contains(have, "tcp") {
		hint = "; without RDMA hardware give --provider tcp (profile key source.provider)"
	}
	return fmt.Errorf("libfabric provider %s cannot listen on %s (%v); providers that can here: %s%s", provider, addr, err, list, hint)
}
