#include "textflag.h"

// FOLD2 folds the four 128-bit lanes of accumulator A by the constants in
// K into T and A's own register, to be added to what A moves onto.
#define FOLD(K, A, T) \
	VPCLMULQDQ $0x00, K, A, T; \
	VPCLMULQDQ $0x11, K, A, A

// func crc32cFold(crc uint32, p *byte, n int, consts *[16]uint64) uint32
//
// n is a multiple of 256, at least 256. Four 512-bit accumulators take
// 256 bytes a turn; then each folds into the next, the last one's lanes
// into its last lane, and the SSE4.2 instruction takes the CRC of that.
TEXT ·crc32cFold(SB), NOSPLIT, $0-36
	MOVL crc+0(FP), AX
	MOVQ p+8(FP), DI
	MOVQ n+16(FP), CX
	MOVQ consts+24(FP), SI

	VBROADCASTI32X4 (SI), Z4   // 2048 bits on
	VBROADCASTI32X4 16(SI), Z5 // 512 bits on
	VMOVDQU64 32(SI), Z6       // lanes 0, 1, 2 onto lane 3; lane 3 stays

	VMOVDQU64 (DI), Z0
	VMOVDQU64 64(DI), Z1
	VMOVDQU64 128(DI), Z2
	VMOVDQU64 192(DI), Z3
	VMOVD AX, X7
	VPXORD Z7, Z0, Z0
	ADDQ $256, DI
	SUBQ $256, CX
	JZ combine

loop:
	FOLD(Z4, Z0, Z8)
	FOLD(Z4, Z1, Z9)
	FOLD(Z4, Z2, Z10)
	FOLD(Z4, Z3, Z11)
	VPTERNLOGD $0x96, (DI), Z8, Z0
	VPTERNLOGD $0x96, 64(DI), Z9, Z1
	VPTERNLOGD $0x96, 128(DI), Z10, Z2
	VPTERNLOGD $0x96, 192(DI), Z11, Z3
	ADDQ $256, DI
	SUBQ $256, CX
	JNZ loop

combine:
	FOLD(Z5, Z0, Z8)
	VPTERNLOGD $0x96, Z8, Z0, Z1
	FOLD(Z5, Z1, Z9)
	VPTERNLOGD $0x96, Z9, Z1, Z2
	FOLD(Z5, Z2, Z10)
	VPTERNLOGD $0x96, Z10, Z2, Z3

	VMOVDQA64 Z3, Z12
	FOLD(Z6, Z3, Z8)
	VPXORQ Z8, Z3, Z3           // lanes 0-2 folded; lane 3 zero
	VEXTRACTI32X4 $3, Z12, X10  // lane 3 as it is
	VEXTRACTI32X4 $1, Z3, X11
	VEXTRACTI32X4 $2, Z3, X12
	VPTERNLOGD $0x96, X11, X12, X10
	VPXORD X3, X10, X10

	VMOVQ X10, AX
	VPEXTRQ $1, X10, BX
	XORL DX, DX
	CRC32Q AX, DX
	CRC32Q BX, DX
	MOVL DX, ret+32(FP)
	VZEROUPPER
	RET
