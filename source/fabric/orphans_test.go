package fabric

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"
)

// acceptedOn returns how many of the process's open TCP sockets were
// accepted on port (their local end is on it, and they have a peer).
func acceptedOn(port uint16) int {
	return len(orphans(netip.AddrPortFrom(netip.IPv4Unspecified(), port), nil))
}

// TestListenerCloseLeavesNoSilentSocket holds 30 TCP connections open on
// a listener's port that never send a connection request (the tcp
// provider accepts each and waits), beside a sender's stream; closing
// the listener closes those 30 sockets (the provider would leak them,
// in CLOSE-WAIT once their peers go) and leaves the stream, which goes
// on to deliver every frame.
func TestListenerCloseLeavesNoSilentSocket(t *testing.T) {
	checkNoLeaks(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n, silent = 20, 30
	data := testCapture(t, testFormat, 0, n)
	l := testListen(t, testConfig())
	port := l.Addr().Port()
	done := sendCapture(ctx, t, senderConfig(l.Addr().String(), ModeWrite, 0, n), data, 0)
	s, err := l.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for range silent {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	for acceptedOn(port) < silent+1 { // the provider takes them from the kernel's queue
		if ctx.Err() != nil {
			t.Fatalf("%d sockets accepted on port %d, want %d", acceptedOn(port), port, silent+1)
		}
		time.Sleep(10 * time.Millisecond)
	}
	l.Close()
	if got := acceptedOn(port); got != 1 {
		t.Errorf("after the listener closed, %d sockets accepted on its port are open, want 1 (the stream's)", got)
	}
	recs, _ := receiveSent(ctx, t, s, done)
	if len(recs) != n {
		t.Errorf("the stream delivered %d frames after its listener closed, want %d", len(recs), n)
	}
}
