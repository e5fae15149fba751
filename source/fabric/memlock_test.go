package fabric

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"h5ingest/frame"
)

// TestCheckLockedMemory checks the pre-scan check of locked memory with
// a fake limit and capability: a provider that pins (verbs) and a limit
// below the rings' bytes fail in one line that names the limit, the need
// and how to raise it; tcp, an unlimited or large enough limit, and
// CAP_IPC_LOCK pass.
func TestCheckLockedMemory(t *testing.T) {
	piMega := frame.Format{Geometry: frame.Geometry{ChipsX: 6, ChipsY: 6, ChipWidth: 256, ChipHeight: 256}, Encoding: frame.Bitplane, BitDepth: 24, Coding: frame.LFSR}
	need := RingBytes(64, piMega) // one module's ring, as profiles set it
	if need < 64*int64(frame.HeaderSize+piMega.PayloadSize()) || need > 64*int64(frame.HeaderSize+piMega.PayloadSize())+1<<20 {
		t.Fatalf("RingBytes(64 Pi-mega slots) = %d", need)
	}
	const mib = 1 << 20
	limit := func(n uint64) func() (uint64, error) { return func() (uint64, error) { return n, nil } }
	for _, tt := range []struct {
		name     string
		provider string
		limit    func() (uint64, error)
		ipcLock  bool
		want     []string // nil: passes
	}{
		{"verbs, the default 8 MiB", "verbs", limit(8 * mib), false, []string{
			"provider verbs pins the receiver's rings, 432.0 MiB (" + fmt.Sprint(need) + " bytes)",
			"but RLIMIT_MEMLOCK lets this process lock 8.0 MiB (8388608 bytes);", "ulimit -l unlimited", "LimitMEMLOCK=infinity"}},
		{"verbs, a limit one byte short", "verbs", limit(uint64(need) - 1), false, []string{"RLIMIT_MEMLOCK"}},
		{"verbs, unable to read the limit", "verbs", func() (uint64, error) { return 0, syscall.EPERM }, false, []string{"cannot read RLIMIT_MEMLOCK"}},
		{"verbs, enough", "verbs", limit(uint64(need)), false, nil},
		{"verbs, unlimited", "verbs", limit(unix.RLIM_INFINITY), false, nil},
		{"verbs, CAP_IPC_LOCK", "verbs", limit(8 * mib), true, nil},
		{"efa pins too", "efa", limit(8 * mib), false, []string{"provider efa pins"}},
		{"tcp pins nothing", "tcp", limit(8 * mib), false, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := checkLockedMemory(tt.provider, need, tt.limit, func() bool { return tt.ipcLock })
			if tt.want == nil {
				if err != nil {
					t.Errorf("%v, want no error", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error, want one saying %q", tt.want)
			}
			t.Log(err) // go test -v shows the line an operator sees
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("%q is more than one line", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%v\ndoes not say %q", err, w)
				}
			}
		})
	}
	// The check as it runs: this process's own limit and capability.
	if err := CheckLockedMemory("tcp", need); err != nil {
		t.Errorf("tcp: %v", err)
	}
	if err := CheckLockedMemory("verbs", 1); err != nil {
		t.Errorf("verbs, one byte: %v", err)
	}
}

// TestLockedMemoryHint checks that a registration refused for want of
// memory by a provider that pins says what the pre-scan check says,
// where the limit is the cause; other errors, and tcp's, are as they were.
func TestLockedMemoryHint(t *testing.T) {
	enomem := fmt.Errorf("fi_mr_reg of 4096 bytes: %w", syscall.ENOMEM)
	if err := lockedMemoryHint("tcp", 1<<40, enomem); err != enomem {
		t.Errorf("tcp: %v", err)
	}
	other := fmt.Errorf("fi_mr_reg: %w", syscall.EINVAL)
	if err := lockedMemoryHint("verbs", 1<<40, other); err != other {
		t.Errorf("verbs, EINVAL: %v", err)
	}
	// A service user: no CAP_IPC_LOCK, the default limit.
	defer func(r func() (uint64, error), c func() bool) { readMemlock, haveIPCLock = r, c }(readMemlock, haveIPCLock)
	readMemlock = func() (uint64, error) { return 8 << 20, nil }
	haveIPCLock = func() bool { return false }
	err := lockedMemoryHint("verbs", 64<<20, enomem)
	if !errors.Is(err, syscall.ENOMEM) || !strings.Contains(err.Error(), "lock 8.0 MiB") || !strings.Contains(err.Error(), "ulimit -l") {
		t.Errorf("verbs, over the limit: %v", err)
	}
	if err := lockedMemoryHint("verbs", 4<<20, enomem); err != enomem {
		t.Errorf("verbs, under the limit: %v, want the error as it was", err)
	}
}
