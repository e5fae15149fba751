package fabric

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestStoppedListenerRefusesLateSenders: a module whose handshake
// finished before Stop is still returned by Accept, even with a done
// context; one that connects after it is refused at its hello with Stop's
// reason, which its Dial returns, and Accept names its module.
func TestStoppedListenerRefusesLateSenders(t *testing.T) {
	checkNoLeaks(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l := testListen(t, testConfig())
	early := sendCapture(ctx, t, senderConfig(l.Addr().String(), ModeWrite, 1, 3), testCapture(t, testFormat, 1, 3), 0)
	// The early module's handshake ends before the stop; Accept is not
	// called yet, as in an acquire that is busy starting another module.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		l.mu.Lock()
		n := len(l.done)
		l.mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the early module's handshake did not finish")
		}
	}
	l.Stop("the scan has stopped")
	done, stop := context.WithCancel(ctx)
	stop()
	s, err := l.Accept(done)
	if err != nil {
		t.Fatalf("Accept after Stop, with a done context: %v, want the module that connected before", err)
	}
	if _, err := receiveAll(ctx, s, 0); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if res := <-early; res.err != nil {
		t.Fatalf("the early sender: %v", res.err)
	}

	late := sendCapture(ctx, t, senderConfig(l.Addr().String(), ModeWrite, 2, 3), testCapture(t, testFormat, 2, 3), 0)
	_, err = l.Accept(ctx)
	var stopped *StoppedError
	if !errors.As(err, &stopped) || stopped.Module != 2 || !errors.Is(err, ErrRefused) {
		t.Errorf("Accept of a module after the stop: %v, want a StoppedError of module 2", err)
	}
	var refused *RefusedError
	res := <-late
	if !errors.As(res.err, &refused) || refused.Code != RefuseScan || !strings.Contains(res.err.Error(), "the scan has stopped") {
		t.Errorf("the late sender got %v, want a refusal saying the scan has stopped", res.err)
	}
}
