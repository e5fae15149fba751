package fabric

import (
	"os"
	"os/signal"
	"syscall"
	"testing"
	"time"
)

// TestSignalsKeptAfterLoad loads libfabric and starts its providers (a
// listener of the tcp provider), then sends the process SIGTERM and
// SIGINT: the program's own handling still gets them. The libraries
// libfabric loads install handlers of their own; loaded after the Go
// runtime's, theirs ended the process at once with exit status 1, so that
// acquire could not drain a scan on Ctrl-C or SIGTERM.
func TestSignalsKeptAfterLoad(t *testing.T) {
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, syscall.SIGTERM, os.Interrupt)
	defer signal.Stop(ch)
	l, err := Listen(DefaultConfig("127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		if err := syscall.Kill(os.Getpid(), sig); err != nil {
			t.Fatal(err)
		}
		select {
		case got := <-ch:
			if got != sig {
				t.Errorf("got %v, want %v", got, sig)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%v never reached the program's handler", sig)
		}
	}
}
