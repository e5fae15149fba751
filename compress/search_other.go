//go:build !amd64

package compress

// useSearchAsm is false where there is no assembly probe loop.
var useSearchAsm = false

// search is searchGo.
func (c *fastLZ4) search(src []byte, base uint32, fwd int, fwdH uint32, mflimit, probes int) (ip, ref int) {
	return c.searchGo(src, base, fwd, fwdH, mflimit, probes)
}
