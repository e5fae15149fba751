// Package kernels holds the CUDA kernels of the gpu package's cuda backend:
// their source (decode.cu), the PTX that clang compiles from it, embedded
// in the binary, and the host side of their contract: the layout of the
// per-frame descriptor the kernels read, their names, and the tables the
// host uploads when it loads the module.
//
// The package has no cgo and needs no GPU. The PTX is regenerated with
// go generate (gen.sh runs Debian's clang-16, no CUDA toolkit); make
// ptx-check fails when the committed copy differs from what the source
// compiles to.
//
// # Contract
//
// A batch is an array of Frame descriptors in device memory, one per frame.
// The host launches, in order on one stream, each with grid (x, n) where n
// is the number of frames and blocks of BlockSize threads:
//
//	Decode   image pixels from the payload
//	CRCSub   CRC-32C of every CRCSubSize-byte sub-piece of payload and image
//	CRCFold  the CRC of every run of CRCRun sub-pieces (a piece)
//	Shuffle  for frames with a Block, the image bit-transposed into Shuffled
//
// and then folds each frame's piece CRCs, payload pieces first, into the
// CRC-32C of the payload and of the image. Every piece but the last of each
// is PieceBytes long. The kernels' threads stride over the work, so any
// grid width is correct; Grid picks one.
package kernels

import (
	_ "embed"
	"encoding/binary"

	"h5ingest/frame"
)

//go:generate ./gen.sh decode.ptx sm_70
//go:generate ./gen.sh decode_sm90.ptx sm_90

// Source is decode.cu, and HostShim host.h, the shim that compiles it as
// host C: for tests that run the kernels without a GPU.
var (
	//go:embed decode.cu
	Source string
	//go:embed host.h
	HostShim string
)

// PTX is decode.cu compiled for sm_70 (PTX ISA 6.0), NUL-terminated as
// cuModuleLoadData wants it: the driver JIT-compiles it for any GPU from
// Volta on.
var PTX = ptx + "\x00"

// PTX90 is decode.cu compiled for sm_90 (PTX ISA 7.8), NUL-terminated: for
// Hopper and newer, where a driver that no longer compiles for Volta may
// refuse PTX that targets it.
var PTX90 = ptx90 + "\x00"

var (
	//go:embed decode.ptx
	ptx string
	//go:embed decode_sm90.ptx
	ptx90 string
)

// Target is one compiled PTX and the oldest compute capability it runs on.
type Target struct {
	Arch         string // e.g. "sm_90"
	Major, Minor int    // the compute capability it needs
	PTX          string // NUL-terminated
}

// Targets returns the PTX a device of compute capability major.minor can
// load, best first: the newest target it supports, then older ones to try
// where the driver refuses the first.
func Targets(major, minor int) []Target {
	all := []Target{{"sm_90", 9, 0, PTX90}, {"sm_70", 7, 0, PTX}}
	var ok []Target
	for _, t := range all {
		if major > t.Major || major == t.Major && minor >= t.Minor {
			ok = append(ok, t)
		}
	}
	return ok
}

// Kernel entry points, by the names the driver looks up.
const (
	Decode  = "h5_decode"
	CRCSub  = "h5_crc_sub"
	CRCFold = "h5_crc_fold"
	Shuffle = "h5_shuffle"
)

// Kernels lists the entry points, in launch order.
var Kernels = []string{Decode, CRCSub, CRCFold, Shuffle}

// Module globals the host fills after loading the module.
const (
	LFSR12Table       = "h5_lfsr12"        // [4096]uint16, code -> count, constant memory
	LFSR6Table        = "h5_lfsr6"         // [64]uint16, code -> count, constant memory
	LFSR12GlobalTable = "h5_lfsr12_global" // the same in global memory (LUTGlobal)
	LFSR6GlobalTable  = "h5_lfsr6_global"  // likewise
	CRCTable          = "h5_crc_table"     // [8][256]uint32, CRC-32C slicing-by-8
)

// Constants shared with decode.cu.
const (
	BlockSize  = 256                 // threads per block
	CRCSubSize = 1024                // bytes per sub-piece (H5_CRC_SUB)
	CRCRun     = 64                  // sub-pieces per piece (H5_CRC_RUN)
	PieceBytes = CRCSubSize * CRCRun // bytes per piece but the last
	FrameSize  = 112                 // bytes of a Frame descriptor
	Align      = 256                 // alignment the host gives every buffer a kernel reads
)

// Frame is the host's copy of one frame's descriptor (struct h5_frame).
// Addresses are device addresses.
type Frame struct {
	Payload, Image, Rot, Subs, Pieces uint64
	PayloadSize, ImageSize            uint32
	Units                             uint32 // Decode work items
	RawSubs, ImgSubs                  uint32
	RawPieces, ImgPieces              uint32
	OpSub, OpRawLast, OpImgLast       uint32 // CRC-32C combine operators
	Format                            frame.Format
	Block                             uint32 // bitshuffle block in pixels; 0: no transpose
	Shuffled                          uint64 // where Shuffle writes the transposed image
	LUT                               uint32 // which copy of the LFSR tables Decode reads: LUTConstant or LUTGlobal
}

// Where Decode reads the LFSR tables (Frame.LUT): constant memory, fastest
// when a warp's threads look up one code, or global memory through the
// cache, which may be faster for the differing codes of neighbouring
// pixels. BenchmarkKernels in package gpu/cuda times both.
const (
	LUTConstant = 0
	LUTGlobal   = 1
)

// ShuffleUnits returns Shuffle's work items for a frame of format f: its
// groups of 8 pixels, the last one possibly short.
func ShuffleUnits(f frame.Format) int { return ceilDiv(f.Pixels(), 8) }

// Layout returns the work counts of a frame of format f: Decode's work
// items, and the sub-pieces and pieces of its payload and image.
func Layout(f frame.Format) (units, rawSubs, imgSubs, rawPieces, imgPieces int) {
	units = f.Pixels()
	if f.Encoding == frame.Bitplane {
		units /= 8
	}
	rawSubs, imgSubs = ceilDiv(f.PayloadSize(), CRCSubSize), ceilDiv(f.ImageSize(), CRCSubSize)
	return units, rawSubs, imgSubs, ceilDiv(rawSubs, CRCRun), ceilDiv(imgSubs, CRCRun)
}

// LastSub returns the bytes of the last sub-piece of n bytes.
func LastSub(n int) int { return n - (ceilDiv(n, CRCSubSize)-1)*CRCSubSize }

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// Put writes the descriptor into b[:FrameSize] in the kernels' layout.
func (d *Frame) Put(b []byte) {
	b = b[:FrameSize]
	le := binary.LittleEndian
	le.PutUint64(b[0:], d.Payload)
	le.PutUint64(b[8:], d.Image)
	le.PutUint64(b[16:], d.Rot)
	le.PutUint64(b[24:], d.Subs)
	le.PutUint64(b[32:], d.Pieces)
	le.PutUint32(b[40:], d.PayloadSize)
	le.PutUint32(b[44:], d.ImageSize)
	le.PutUint32(b[48:], d.Units)
	le.PutUint32(b[52:], d.RawSubs)
	le.PutUint32(b[56:], d.ImgSubs)
	le.PutUint32(b[60:], d.RawPieces)
	le.PutUint32(b[64:], d.ImgPieces)
	le.PutUint32(b[68:], d.OpSub)
	le.PutUint32(b[72:], d.OpRawLast)
	le.PutUint32(b[76:], d.OpImgLast)
	f := &d.Format
	le.PutUint16(b[80:], uint16(f.ChipsX))
	le.PutUint16(b[82:], uint16(f.ChipsY))
	le.PutUint16(b[84:], uint16(f.ChipWidth))
	le.PutUint16(b[86:], uint16(f.ChipHeight))
	b[88] = byte(f.Encoding)
	b[89] = byte(f.BitDepth)
	b[90] = byte(f.Coding)
	b[91] = byte(f.PixelSize())
	le.PutUint32(b[92:], d.Block)
	le.PutUint64(b[96:], d.Shuffled)
	le.PutUint32(b[104:], d.LUT)
	le.PutUint32(b[108:], 0)
}

// Grid returns the grid width for a launch over at most work items per
// frame: enough blocks for one item per thread, up to a cap past which the
// threads loop.
func Grid(work int) int { return max(1, min(ceilDiv(work, BlockSize), 1<<15)) }

// CRCTables returns the CRC-32C slicing-by-8 tables: t[0] is the bytewise
// table of the reflected polynomial, t[k][i] the CRC of byte i followed by k
// zero bytes.
func CRCTables() *[8][256]uint32 {
	var t [8][256]uint32
	for i := range 256 {
		c := uint32(i)
		for range 8 {
			c = c>>1 ^ 0x82F63B78&-(c&1)
		}
		t[0][i] = c
	}
	for k := 1; k < 8; k++ {
		for i := range 256 {
			c := t[k-1][i]
			t[k][i] = c>>8 ^ t[0][c&0xFF]
		}
	}
	return &t
}

// TableBytes returns the little-endian bytes of the module globals the host
// uploads, by name: the LFSR tables of package frame and CRCTables.
func TableBytes() map[string][]byte {
	le := binary.LittleEndian
	var lfsr12, lfsr6, crc []byte
	for _, v := range frame.LFSRCountTable(12) {
		lfsr12 = le.AppendUint16(lfsr12, v)
	}
	for _, v := range frame.LFSRCountTable(6) {
		lfsr6 = le.AppendUint16(lfsr6, v)
	}
	for _, row := range CRCTables() {
		for _, v := range row {
			crc = le.AppendUint32(crc, v)
		}
	}
	return map[string][]byte{LFSR12Table: lfsr12, LFSR6Table: lfsr6,
		LFSR12GlobalTable: lfsr12, LFSR6GlobalTable: lfsr6, CRCTable: crc}
}
