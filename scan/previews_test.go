package scan

import "testing"

// TestPreviewAddress: a stage's series binds the port after the scan's
// own streams, one per module, or its own address, moved by the module's
// index in a scan of several; a port ZeroMQ chooses stays so.
func TestPreviewAddress(t *testing.T) {
	for _, c := range []struct {
		name, live, own   string
		modules, index, k int
		want              string
	}{
		{"one module", "tcp://127.0.0.1:31001", "", 1, 0, 0, "tcp://127.0.0.1:31002"},
		{"no modules listed", "tcp://127.0.0.1:31001", "", 0, 0, 0, "tcp://127.0.0.1:31002"},
		{"module 1 of 3", "tcp://0.0.0.0:31001", "", 3, 1, 0, "tcp://0.0.0.0:31005"},
		{"second series of module 2 of 3", "tcp://0.0.0.0:31001", "", 3, 2, 1, "tcp://0.0.0.0:31009"},
		{"own address", "tcp://127.0.0.1:31001", "tcp://127.0.0.1:40000", 1, 0, 0, "tcp://127.0.0.1:40000"},
		{"own address, module 2 of 3", "tcp://127.0.0.1:31001", "tcp://127.0.0.1:40000", 3, 2, 0, "tcp://127.0.0.1:40002"},
		{"any port", "tcp://127.0.0.1:*", "", 1, 0, 0, "tcp://127.0.0.1:*"},
		{"IPv6", "tcp://[::1]:31001", "", 1, 0, 0, "tcp://[::1]:31002"},
	} {
		if got := previewAddress(c.live, c.own, c.modules, c.index, c.k); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}
