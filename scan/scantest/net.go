package scantest

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"testing"
)

// FreeAddr returns a loopback address, host and port, whose port was
// free a moment ago: for a receiver, a service or a stream the test
// starts next.
func FreeAddr(t testing.TB) string {
	t.Helper()
	return fmt.Sprintf("127.0.0.1:%d", FreePort(t))
}

// handedOut holds the ports FreePort and FreePorts returned, which they
// return to no other test of the process: tests that run in parallel
// each get ports of their own, though the first has not bound its port
// yet when the next asks.
var handedOut sync.Map

// FreePort returns a loopback port that was free a moment ago, and that
// no other call of this test binary returned.
func FreePort(t testing.TB) int {
	t.Helper()
	for range 100 {
		port := listenFree(t)
		if _, taken := handedOut.LoadOrStore(port, true); !taken {
			return port
		}
	}
	t.Fatal("no free loopback port that no other test was given")
	return 0
}

// listenFree returns a loopback port free a moment ago, outside the
// system's range of ports for outgoing connections where it leaves room
// (below ip_local_port_range's first, from 10000): a port from that range
// can be taken, between the test's pick and its bind, by a socket that
// connects out (a sender, an HTTP client), which failed tests with "bind:
// address already in use". Elsewhere it is a port the system gives a
// listener.
func listenFree(t testing.TB) int {
	t.Helper()
	if lo, hi := quietPorts(); hi-lo >= 1000 {
		for range 200 {
			port := lo + rand.IntN(hi-lo)
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
			if err == nil {
				l.Close()
				return port
			}
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// quietPorts returns the ports [lo, hi) below the system's range for
// outgoing connections, from 10000; an empty range where it cannot say.
func quietPorts() (lo, hi int) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0
	}
	var first, last int
	if _, err := fmt.Sscan(string(b), &first, &last); err != nil {
		return 0, 0
	}
	return 10000, first
}

// FreePorts returns the first of n consecutive loopback ports that were
// free a moment ago, and that no other call of this test binary returned:
// the source port of a profile of n modules, module K's receiver
// listening on it plus K's index.
func FreePorts(t testing.TB, n int) int {
	t.Helper()
	for range 50 {
		base := FreePort(t)
		var ls []net.Listener
		for i := range n {
			if base+i > 65535 {
				break
			}
			if i > 0 {
				if _, taken := handedOut.Load(base + i); taken {
					break
				}
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
			for i := 1; i < n; i++ {
				handedOut.Store(base+i, true)
			}
			return base
		}
	}
	t.Fatalf("no %d consecutive free loopback ports", n)
	return 0
}
