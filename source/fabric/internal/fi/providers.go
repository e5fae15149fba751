package fi

// knownProviders are the libfabric providers Providers asks about, by name:
// those that may offer connected endpoints, RDMA ones first.
var knownProviders = []string{"verbs", "efa", "psm3", "psm2", "opx", "cxi", "ucx", "usnic", "tcp", "sockets", "net", "shm", "udp"}

// Providers returns the libfabric providers of this machine that offer the
// endpoints the receiver listens with (see GetInfo) at addr, host:port, of
// those known by name; verbs is among them only where an RDMA device is.
// It is for messages: a receiver told to use a provider that is not here
// can say which are.
func Providers(addr string) []string {
	var have []string
	for _, p := range knownProviders {
		info, err := GetInfo(p, addr, true)
		if err != nil {
			continue
		}
		info.Close()
		have = append(have, p)
	}
	return have
}
