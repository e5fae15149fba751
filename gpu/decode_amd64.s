#include "textflag.h"

// Byte k of a broadcast plane dword feeds accumulator bytes 4k..4k+3 of
// each 128-bit lane.
DATA spread24<>+0x00(SB)/8, $0x0101010100000000
DATA spread24<>+0x08(SB)/8, $0x0303030302020202
DATA spread24<>+0x10(SB)/8, $0x0101010100000000
DATA spread24<>+0x18(SB)/8, $0x0303030302020202
GLOBL spread24<>(SB), RODATA|NOPTR, $32

// The bit each accumulator byte takes: lane 0 the high nibble's pixels,
// lane 1 the low nibble's, so that the unpacks below put pixels in order.
DATA bits24<>+0x00(SB)/8, $0x1020408010204080
DATA bits24<>+0x08(SB)/8, $0x1020408010204080
DATA bits24<>+0x10(SB)/8, $0x0102040801020408
DATA bits24<>+0x18(SB)/8, $0x0102040801020408
GLOBL bits24<>(SB), RODATA|NOPTR, $32

// PLANE shifts accumulator A left by one bit per byte and adds the bit of
// the plane at BX to each pixel's byte, then moves BX to the next plane.
#define PLANE(A) \
	VPBROADCASTD (BX), Y4; \
	VPSHUFB Y8, Y4, Y4; \
	VPAND Y9, Y4, Y4; \
	VPCMPEQB Y9, Y4, Y4; \
	VPADDB A, A, A; \
	VPSUBB Y4, A, A; \
	ADDQ DX, BX

#define PLANES8(A) \
	VPXOR A, A, A; \
	PLANE(A); PLANE(A); PLANE(A); PLANE(A); \
	PLANE(A); PLANE(A); PLANE(A); PLANE(A)

// func codes24AVX2(dst *uint32, row *byte, planeBytes, groups int)
TEXT ·codes24AVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ row+8(FP), SI
	MOVQ planeBytes+16(FP), DX
	MOVQ groups+24(FP), CX
	TESTQ CX, CX
	JZ   done
	VMOVDQU spread24<>(SB), Y8
	VMOVDQU bits24<>(SB), Y9
	VPXOR Y10, Y10, Y10

loop:
	MOVQ SI, BX
	PLANES8(Y0) // bits 23-16
	PLANES8(Y1) // bits 15-8
	PLANES8(Y2) // bits 7-0
	VPUNPCKLBW Y1, Y2, Y3  // low and middle bytes, pixels 0-7 and 16-23 of the lanes
	VPUNPCKHBW Y1, Y2, Y5
	VPUNPCKLBW Y10, Y0, Y6 // high bytes, zero-extended
	VPUNPCKHBW Y10, Y0, Y7
	VPUNPCKLWD Y6, Y3, Y11
	VPUNPCKHWD Y6, Y3, Y12
	VPUNPCKLWD Y7, Y5, Y13
	VPUNPCKHWD Y7, Y5, Y14
	VMOVDQU Y11, 0(DI)
	VMOVDQU Y12, 32(DI)
	VMOVDQU Y13, 64(DI)
	VMOVDQU Y14, 96(DI)
	ADDQ $4, SI
	ADDQ $128, DI
	DECQ CX
	JNZ  loop
	VZEROUPPER

done:
	RET

// func lfsr24AVX2(codes *uint32, groups int, table *[4096]uint32)
//
// Eight codes at a time: the low 12 bits of each index the table through
// a gather, and the high 12 bits too unless all eight are code 0 (count
// 0: a frame of under 4096 counts a pixel, as at short exposures, needs
// no second look-up).
TEXT ·lfsr24AVX2(SB), NOSPLIT, $0-24
	MOVQ codes+0(FP), DI
	MOVQ groups+8(FP), CX
	MOVQ table+16(FP), SI
	TESTQ CX, CX
	JZ lfsrdone
	VPCMPEQD Y15, Y15, Y15
	VPSRLD $20, Y15, Y14 // 0xFFF in each dword

lfsrloop:
	VMOVDQU (DI), Y0
	VPAND Y14, Y0, Y1
	VPSRLD $12, Y0, Y2
	VPAND Y14, Y2, Y2
	VMOVDQA Y15, Y3
	VPXOR Y4, Y4, Y4
	VPGATHERDD Y3, (SI)(Y1*4), Y4
	VPTEST Y2, Y2
	JZ lfsrstore
	VMOVDQA Y15, Y5
	VPXOR Y6, Y6, Y6
	VPGATHERDD Y5, (SI)(Y2*4), Y6
	VPSLLD $12, Y6, Y6
	VPOR Y6, Y4, Y4

lfsrstore:
	VMOVDQU Y4, (DI)
	ADDQ $32, DI
	DECQ CX
	JNZ lfsrloop
	VZEROUPPER

lfsrdone:
	RET
