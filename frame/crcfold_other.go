//go:build !amd64

package frame

import "hash/crc32"

// update is crc32.Update with the Castagnoli table.
func update(crc uint32, p []byte) uint32 { return crc32.Update(crc, castagnoli, p) }
