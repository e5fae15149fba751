package fabric

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"
)

func TestRetryable(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{&Error{Op: "connect", Code: syscall.ECONNREFUSED}, true},
		{fmt.Errorf("dial: %w", &Error{Op: "connection event", Code: syscall.ECONNRESET}), true},
		{&Error{Op: "connect", Code: syscall.EINVAL}, false},
		{fmt.Errorf("receiver refused the connection (code 5): %w", ErrProtocol), false},
		{errors.New("something else"), false},
	} {
		if got := retryable(tc.err); got != tc.want {
			t.Errorf("retryable(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// TestDialWait starts a sender before its receiver listens: it connects
// once the receiver is up. With no receiver at all it gives up after its
// timeout, and at once when its context ends.
func TestDialWait(t *testing.T) {
	checkNoLeaks(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	addr := freeAddr(t)
	done := make(chan error, 1)
	go func() {
		s, err := DialWait(ctx, senderConfig(addr, ModeWrite, 0, 1))
		if err == nil {
			s.Abort()
		}
		done <- err
	}()
	time.Sleep(400 * time.Millisecond) // the sender has tried and failed by now
	cfg := testConfig()
	cfg.Addr = addr
	l := testListen(t, cfg)
	st, err := l.Accept(ctx)
	if err != nil {
		t.Fatalf("accept: %v", err)
	}
	defer st.Close()
	if err := <-done; err != nil {
		t.Errorf("DialWait: %v", err)
	}
	st.Close()

	cfg2 := senderConfig(freeAddr(t), ModeWrite, 0, 1)
	cfg2.Timeout = 500 * time.Millisecond
	start := time.Now()
	if _, err := DialWait(ctx, cfg2); err == nil || time.Since(start) < cfg2.Timeout || time.Since(start) > 5*time.Second {
		t.Errorf("DialWait with nobody listening: %v after %v, want an error after about %v", err, time.Since(start), cfg2.Timeout)
	}
	short, stop := context.WithTimeout(ctx, 300*time.Millisecond)
	defer stop()
	cfg2.Timeout = time.Minute
	start = time.Now()
	if _, err := DialWait(short, cfg2); !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
		t.Errorf("DialWait with its context ending: %v after %v", err, time.Since(start))
	}
}

// freeAddr returns a loopback address with a free port.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
