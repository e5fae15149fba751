package roce

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// ParamsVersion is the version of the parameter files' schema.
const ParamsVersion = 1

// Params is what the receiver writes to its --rdma-params file: its end of
// each module's queue pair, as pimega.h's init arguments carry them
// (be_gid, vaddr, rkey, qpn, bufferSize), and what the front end must
// know of the ring. It is written atomically as soon as the queue pairs
// exist, and again with Ready once every one is ready to receive.
type Params struct {
	Version int            `json:"version"`
	Nonce   string         `json:"nonce"` // this run of the receiver; the front end answers it
	Ready   bool           `json:"ready"` // every module's queue pair is ready to receive (RTR)
	Modules []ModuleParams `json:"modules"`
}

// ModuleParams is the receiver's end of one module's queue pair.
type ModuleParams struct {
	Module      int    `json:"module"`
	Device      string `json:"device"`
	Port        int    `json:"port"`
	GID         string `json:"gid"`       // pimega.h be_gid
	GIDIndex    int    `json:"gid_index"` // the receiver's GID table entry
	GIDType     string `json:"gid_type"`  // RoCE v1 or v2
	QPN         uint32 `json:"qpn"`       // pimega.h qpn
	PSN         uint32 `json:"psn"`       // the PSN the receiver expects first
	Addr        uint64 `json:"vaddr"`     // pimega.h vaddr: slot 0's address
	RKey        uint32 `json:"rkey"`      // pimega.h rkey
	SlotSize    int    `json:"slot_size"` // bytes from one slot to the next
	Slots       int    `json:"slots"`     // slots in the ring; pimega.h bufferSize is slots times slot_size
	MTU         int    `json:"mtu"`
	QPType      string `json:"qp_type"`      // rc or uc
	Immediate   string `json:"immediate"`    // frame or slot
	FrameHeader string `json:"frame_header"` // frame or none
	Ready       bool   `json:"ready"`        // this queue pair is ready to receive
}

// FrontEndParams is what a front end answers with, in the --front-end
// file: its end of each module's queue pair (pimega.h fe_gid, fe_mac).
type FrontEndParams struct {
	Version int            `json:"version"`
	Nonce   string         `json:"nonce"` // the receiver's nonce it answers
	Modules []FrontEndPort `json:"modules"`
}

// FrontEndPort is a front end's end of one module's queue pair.
type FrontEndPort struct {
	Module int    `json:"module"`
	GID    string `json:"gid"` // pimega.h fe_gid
	QPN    uint32 `json:"qpn"`
	PSN    uint32 `json:"psn"`           // the first PSN it sends
	MAC    string `json:"mac,omitempty"` // pimega.h fe_mac, for people
}

// peer checks a front end's end of a queue pair.
func (p FrontEndPort) peer() (gid netip.Addr, err error) {
	gid, err = netip.ParseAddr(p.GID)
	switch {
	case err != nil:
		return gid, fmt.Errorf("module %d: front end GID %q: want an IPv6 address such as fe80::1 or ::ffff:10.0.0.2", p.Module, p.GID)
	case gid.Zone() != "":
		return gid, fmt.Errorf("module %d: front end GID %q: a GID has no zone (%%%s): give the address alone; the receiver's port says where it is reached", p.Module, p.GID, gid.Zone())
	case gid.IsUnspecified() || gid.IsMulticast():
		return gid, fmt.Errorf("module %d: front end GID %q: no port's GID (unspecified or multicast): want the front end's own, such as fe80::1 or ::ffff:10.0.0.2", p.Module, p.GID)
	case p.QPN == 0 || p.QPN > 0xffffff:
		return gid, fmt.Errorf("module %d: front end QPN %d: want 1 to 16777215", p.Module, p.QPN)
	case p.PSN > 0xffffff:
		return gid, fmt.Errorf("module %d: front end PSN %d: want 0 to 16777215", p.Module, p.PSN)
	}
	return gid, nil
}

// newNonce returns a nonce for one run.
func newNonce() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// writeJSON writes v to path atomically: a reader sees the old file or
// the new one, never a part.
func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	_, err = tmp.Write(append(b, '\n'))
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// maxParamsBytes bounds a parameter file: a few modules' entries take a
// few KiB.
const maxParamsBytes = 1 << 20

// readJSON reads v from path; a file absent is os.ErrNotExist.
func readJSON(path string, v any) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxParamsBytes+1))
	if err != nil {
		return err
	}
	if len(b) > maxParamsBytes {
		return fmt.Errorf("%s: larger than %d bytes, not a parameter file", path, maxParamsBytes)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// pollInterval is how often a file waited for is looked at.
const pollInterval = 10 * time.Millisecond

// waitFile reads path into v each pollInterval until accept finds it the
// one waited for (nil), ctx is done or the deadline passes: then an error
// wrapping ErrTimeout with what was last wrong with the file (not there,
// not JSON, another run's). A file that cannot be read or parsed is waited
// past: it may be a stale one being replaced.
func waitFile(ctx context.Context, path string, deadline time.Time, v any, accept func() error) error {
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	why := errors.New("no such file")
	for {
		err := readJSON(path, v)
		if err == nil {
			if err = accept(); err == nil {
				return nil
			}
		}
		if !errors.Is(err, os.ErrNotExist) {
			why = err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w (%s: %v)", ErrTimeout, path, why)
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("%w (%s: %v)", ErrTimeout, path, why)
			}
			return ctx.Err()
		case <-t.C:
		}
	}
}

// lockFile takes an exclusive lock on path+".lock", for a read, change and
// write of path by processes that share it; the function it returns gives
// the lock back.
func lockFile(path string) (unlock func(), err error) {
	f, err := os.OpenFile(path+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() { syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
}
