package fabric

import (
	"errors"
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"

	"h5ingest/frame"
)

// pinless are the providers whose registrations lock no memory: they
// copy through the kernel's sockets. Every other provider (verbs first)
// pins what it registers, against RLIMIT_MEMLOCK.
var pinless = map[string]bool{"tcp": true, "sockets": true, "udp": true, "net": true, "shm": true}

// Pins reports whether provider locks the memory it registers (verbs
// does; tcp does not).
func Pins(provider string) bool { return !pinless[provider] }

// RingBytes returns the memory one connection registers for a ring of
// slots slots of frames of f: the slots, and its control buffers.
func RingBytes(slots int, f frame.Format) int64 {
	slot := int64(frame.HeaderSize+f.PayloadSize()+63) &^ 63
	ctrl := int64(ctrlBuffers(slots)+2+scratchBuffers+smallBuffers) * ctrlSize
	return int64(slots)*slot + ctrl
}

// CheckLockedMemory reports whether this process may lock need bytes, as
// provider's registrations of the receiver's rings will: it compares
// RLIMIT_MEMLOCK with need where provider pins memory and the process
// lacks CAP_IPC_LOCK (root has it), and says in one line what the limit
// is, what the rings need, and how to raise it. Without this check the
// first sender's handshake fails with "Cannot allocate memory".
func CheckLockedMemory(provider string, need int64) error {
	return checkLockedMemory(provider, need, readMemlock, haveIPCLock)
}

// readMemlock and haveIPCLock read the process's limit and capability;
// tests replace them.
var (
	readMemlock = memlockLimit
	haveIPCLock = hasIPCLock
)

func checkLockedMemory(provider string, need int64, limit func() (uint64, error), ipcLock func() bool) error {
	if !Pins(provider) || need <= 0 || ipcLock() {
		return nil
	}
	have, err := limit()
	if err != nil {
		return fmt.Errorf("locked memory: cannot read RLIMIT_MEMLOCK: %w", err)
	}
	if have == unix.RLIM_INFINITY || have >= uint64(need) {
		return nil
	}
	return fmt.Errorf("locked memory: provider %s pins the receiver's rings, %s, but RLIMIT_MEMLOCK lets this process lock %s; "+
		"raise it for the user that runs h5ingest: ulimit -l unlimited in its shell, LimitMEMLOCK=infinity in its systemd unit, "+
		"or a memlock line in /etc/security/limits.conf", provider, sizeText(uint64(need)), sizeText(have))
}

// lockedMemoryHint adds to a failed registration of n bytes, where the
// provider pins memory and ran out of it, what the check says.
func lockedMemoryHint(provider string, n int64, err error) error {
	if !Pins(provider) || !errors.Is(err, syscall.ENOMEM) {
		return err
	}
	if hint := CheckLockedMemory(provider, n); hint != nil {
		return fmt.Errorf("%w (%v)", err, hint)
	}
	return err
}

// memlockLimit returns the soft RLIMIT_MEMLOCK.
func memlockLimit() (uint64, error) {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &rl); err != nil {
		return 0, err
	}
	return rl.Cur, nil
}

// hasIPCLock reports whether the process has CAP_IPC_LOCK in its
// effective set, which lifts RLIMIT_MEMLOCK.
func hasIPCLock() bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false
	}
	return data[unix.CAP_IPC_LOCK/32].Effective&(1<<(unix.CAP_IPC_LOCK%32)) != 0
}

// sizeText writes n bytes as MiB or GiB, with the exact count.
func sizeText(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB (%d bytes)", float64(n)/(1<<30), n)
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB (%d bytes)", float64(n)/(1<<20), n)
	}
	return fmt.Sprintf("%d bytes", n)
}
