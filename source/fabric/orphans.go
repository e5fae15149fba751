package fabric

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// libfabric's tcp provider (1.17) accepts every TCP connection to a
// listener at once and waits for its connection request; a peer that
// connects and sends nothing (a port scanner, a client that holds a
// connection open, a front end that hangs) stays in the provider's poll
// set until it sends or closes. When the listener closes, the provider
// forgets such sockets without closing them (its connection handle holds
// no reference on the listener): each leaks a descriptor for good, in
// CLOSE-WAIT once its peer goes. The listener therefore finds them, the
// sockets of the process accepted on its port whose peer is none of its
// streams', and closes them itself (orphans, closeOrphans).

// orphans returns the descriptors of the process's TCP sockets whose
// local end is addr (any local address where addr's is unspecified) and
// whose peer is not in keep: those a closed listener on addr left.
func orphans(addr netip.AddrPort, keep map[netip.AddrPort]int) []int {
	if keep[netip.AddrPort{}] > 0 {
		return nil // a stream whose peer is not known: none can be told from it
	}
	local := map[uint64]bool{} // socket inodes accepted on addr from a peer not kept
	for _, table := range []string{"/proc/self/net/tcp", "/proc/self/net/tcp6"} {
		readTCPTable(table, func(l, r netip.AddrPort, inode uint64) {
			if l.Port() != addr.Port() || !r.Addr().IsValid() || r.Port() == 0 {
				return
			}
			if !addr.Addr().IsUnspecified() && l.Addr().Unmap() != addr.Addr().Unmap() {
				return
			}
			if keep[netip.AddrPortFrom(r.Addr().Unmap(), r.Port())] > 0 {
				return
			}
			local[inode] = true
		})
	}
	if len(local) == 0 {
		return nil
	}
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return nil
	}
	var fds []int
	for _, e := range entries {
		link, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err != nil || !strings.HasPrefix(link, "socket:[") {
			continue
		}
		inode, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]"), 10, 64)
		if err != nil || !local[inode] {
			continue
		}
		if fd, err := strconv.Atoi(e.Name()); err == nil {
			fds = append(fds, fd)
		}
	}
	return fds
}

// closeOrphans closes the descriptors fds (of orphans); it returns how
// many it closed.
func closeOrphans(fds []int) int {
	n := 0
	for _, fd := range fds {
		if syscall.Close(fd) == nil {
			n++
		}
	}
	return n
}

// readTCPTable calls f with the local and remote ends and the inode of
// each socket of a /proc/net/tcp or tcp6 table.
func readTCPTable(path string, f func(local, remote netip.AddrPort, inode uint64)) {
	file, err := os.Open(path)
	if err != nil {
		return
	}
	defer file.Close()
	sc := bufio.NewScanner(file)
	sc.Scan() // the heading
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 10 {
			continue
		}
		l, lok := procAddr(fields[1])
		r, rok := procAddr(fields[2])
		inode, err := strconv.ParseUint(fields[9], 10, 64)
		if lok && rok && err == nil && inode != 0 {
			f(l, r, inode)
		}
	}
}

// procAddr parses an address of /proc/net/tcp ("0100007F:1F90" on a
// little-endian host: the IP as 32-bit words in the host's order, the
// port in hexadecimal).
func procAddr(s string) (netip.AddrPort, bool) {
	ipHex, portHex, ok := strings.Cut(s, ":")
	if !ok {
		return netip.AddrPort{}, false
	}
	raw, err := hex.DecodeString(ipHex)
	port, perr := strconv.ParseUint(portHex, 16, 16)
	if err != nil || perr != nil || len(raw)%4 != 0 {
		return netip.AddrPort{}, false
	}
	for i := 0; i < len(raw); i += 4 {
		binary.BigEndian.PutUint32(raw[i:], binary.NativeEndian.Uint32(raw[i:]))
	}
	ip, ok := netip.AddrFromSlice(raw)
	if !ok {
		return netip.AddrPort{}, false
	}
	return netip.AddrPortFrom(ip.Unmap(), uint16(port)), true
}
