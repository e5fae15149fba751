package fi

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

// TestPick checks which of the entries libfabric offers GetInfo takes:
// the first of the asked address format whose address is the one to
// listen on (verbs offers an entry per RDMA device and address), any of
// that format for a host name or an unspecified address, and an error
// naming what was offered when none matches.
func TestPick(t *testing.T) {
	a := func(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }
	offers := []Offer{
		{Provider: "verbs", AddrFormat: AddrIPv4, Protocol: ProtoRDMACMRC, Addr: a("10.0.0.1:7100")},  // mlx5_0
		{Provider: "verbs", AddrFormat: AddrIPv4, Protocol: ProtoRDMACMRC, Addr: a("10.0.1.1:7100")},  // mlx5_1
		{Provider: "verbs", AddrFormat: AddrIPv6, Protocol: ProtoRDMACMRC, Addr: a("[fd00::1]:7100")}, // mlx5_1, IPv6
		{Provider: "verbs", AddrFormat: 4 /* FI_SOCKADDR_IB */, Protocol: ProtoRDMACMRC},              // IB address
		{Provider: "verbs", AddrFormat: AddrIPv4, Protocol: ProtoRDMACMRC, Addr: a("10.0.1.1:7100")},  // a duplicate
	}
	for _, tt := range []struct {
		want   string
		format uint32
		pick   int
		err    string
	}{
		{"10.0.1.1", AddrIPv4, 1, ""},
		{"10.0.0.1", AddrIPv4, 0, ""},
		{"fd00::1", AddrIPv6, 2, ""},
		{"::ffff:10.0.1.1", AddrIPv4, 1, ""},
		{"0.0.0.0", AddrIPv4, 0, ""},
		{"", AddrIPv4, 0, ""}, // a host name
		{"10.0.2.1", AddrIPv4, 0, "no endpoint at address 10.0.2.1 among the 5 offered (verbs at 10.0.0.1, verbs at 10.0.1.1, verbs address format 3, verbs address format 4"},
	} {
		want, _ := netip.ParseAddr(tt.want)
		k, err := Pick(offers, want, tt.format)
		switch {
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("Pick(%q) = %d, %v; want an error saying %q", tt.want, k, err, tt.err)
		case tt.err == "" && (err != nil || k != tt.pick):
			t.Errorf("Pick(%q) = %d, %v; want %d", tt.want, k, err, tt.pick)
		}
	}
}

// TestHints checks the hints GetInfo gives: IPv4 socket addresses unless
// the host is an IPv6 address, and the RDMA CM's RC protocol for verbs
// only; and that the tcp provider answers them with an entry at the
// address asked for.
func TestHints(t *testing.T) {
	for _, tt := range []struct {
		provider, host  string
		format, protocl uint32
	}{
		{"verbs", "10.0.0.1", AddrIPv4, ProtoRDMACMRC},
		{"verbs", "fd00::1", AddrIPv6, ProtoRDMACMRC},
		{"verbs", "node7-ib", AddrIPv4, ProtoRDMACMRC},
		{"tcp", "127.0.0.1", AddrIPv4, ProtoUnspec},
		{"tcp", "::ffff:127.0.0.1", AddrIPv4, ProtoUnspec},
	} {
		f, p := Hints(tt.provider, tt.host)
		if f != tt.format || p != tt.protocl {
			t.Errorf("Hints(%s, %s) = %d, %d; want %d, %d", tt.provider, tt.host, f, p, tt.format, tt.protocl)
		}
	}
	info, err := GetInfo("tcp", "127.0.0.1:7199", true)
	if err != nil {
		t.Fatal(err)
	}
	defer info.Close()
	if got := info.AddrFormat(); got != AddrIPv4 {
		t.Errorf("address format %d, want FI_SOCKADDR_IN (%d)", got, AddrIPv4)
	}
	if got := info.SrcAddr(); got != netip.MustParseAddrPort("127.0.0.1:7199") {
		t.Errorf("source address %v, want 127.0.0.1:7199", got)
	}
}

// TestMemoryOutlivesItsDomain checks the invariant that keeps a caching
// provider (verbs) from handing out stale pages: memory registered with
// a domain is not unmapped while the domain is open, only after.
func TestMemoryOutlivesItsDomain(t *testing.T) {
	info, err := GetInfo("tcp", "127.0.0.1:7198", true)
	if err != nil {
		t.Fatal(err)
	}
	defer info.Close()
	fab, err := OpenFabric(info)
	if err != nil {
		t.Fatal(err)
	}
	defer fab.Close()
	dom, err := OpenDomain(fab, info)
	if err != nil {
		t.Fatal(err)
	}
	mem, err := Alloc(1 << 16)
	if err != nil {
		t.Fatal(err)
	}
	mr, err := Register(dom, mem, AccessSend|AccessWrite)
	if err != nil {
		t.Fatal(err)
	}
	if got := mr.Access(); got != AccessSend|AccessWrite || got&AccessRemoteWrite != 0 {
		t.Errorf("access %#x, want FI_SEND|FI_WRITE only", got)
	}
	if err := mr.Close(); err != nil {
		t.Fatal(err)
	}
	if err := mem.Free(); !errors.Is(err, ErrRegistered) {
		t.Errorf("Free with the domain open: %v, want ErrRegistered", err)
	}
	if len(mem.Bytes()) != 1<<16 {
		t.Fatal("the refused Free unmapped the memory")
	}
	if err := dom.Close(); err != nil {
		t.Fatal(err)
	}
	if err := mem.Free(); err != nil {
		t.Errorf("Free after the domain closed: %v", err)
	}
}

// TestProviderText checks that a provider's own error text is kept only
// where it means something: never the socket providers' (their codes are
// whatever errno the last system call left), never for a code of 0, and
// never the same text twice.
func TestProviderText(t *testing.T) {
	for _, tt := range []struct {
		provider string
		code     int
		text     string
		want     string
	}{
		{"tcp", 2, "No such file or directory", "Operation canceled"},
		{"sockets", 107, "Transport endpoint is not connected", "Operation canceled"},
		{"verbs", 0, "Success", "Operation canceled"},
		{"verbs", 10, "remote access error", "Operation canceled (remote access error)"},
		{"verbs", 5, "Operation canceled", "Operation canceled"},
	} {
		if got := withProviderText(tt.provider, "Operation canceled", tt.code, tt.text); got != tt.want {
			t.Errorf("%s code %d %q: %q, want %q", tt.provider, tt.code, tt.text, got, tt.want)
		}
	}
}
