package scantest

import (
	"fmt"
	"net"
	"testing"
)

// FreeAddr returns a loopback address, host and port, whose port was
// free a moment ago: for a receiver, a service or a stream the test
// starts next.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// FreePort returns a loopback port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// FreePorts returns the first of n consecutive loopback ports that were
// free a moment ago: the source port of a profile of n modules, module
// K's receiver listening on it plus K's index.
func FreePorts(t testing.TB, n int) int {
	t.Helper()
	for range 50 {
		base := FreePort(t)
		var ls []net.Listener
		for i := range n {
			if base+i > 65535 {
				break
			}
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", base+i))
			if err != nil {
				break
			}
			ls = append(ls, l)
		}
		for _, l := range ls {
			l.Close()
		}
		if len(ls) == n {
			return base
		}
	}
	t.Fatalf("no %d consecutive free loopback ports", n)
	return 0
}
