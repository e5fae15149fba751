package compress

// useSearchAsm says whether the LZ4 probe loop runs in assembly; tests
// turn it off to cross-check searchGo.
var useSearchAsm = true

// searchAsm is searchGo in assembly, with src, table and base as
// pointers and a 32-bit base.
//
//go:noescape
func searchAsm(src *byte, table *[1 << lz4HashLog]uint32, base uint32, fwd, fwdH, mflimit, probes int) (ip, ref int)

// search is searchGo, in assembly unless a test turned it off.
func (c *fastLZ4) search(src []byte, base uint32, fwd int, fwdH uint32, mflimit, probes int) (ip, ref int) {
	if !useSearchAsm {
		return c.searchGo(src, base, fwd, fwdH, mflimit, probes)
	}
	return searchAsm(&src[0], &c.table, base, fwd, int(fwdH), mflimit, probes)
}
