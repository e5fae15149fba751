#include "textflag.h"

// The vector decoders of 12-, 6- and 1-bit bitplane rows into 16-bit
// pixels (bitplane_amd64.go). Each keeps the start of the current row's
// output in R12 and of its payload in R14, and walks the row's groups
// with DI and SI.

// ARGS loads the arguments every kernel takes, and the first row's starts.
#define ARGS \
	MOVQ dst+0(FP), R12; \
	MOVQ row+8(FP), R14; \
	MOVQ planeBytes+16(FP), DX; \
	MOVQ rows+32(FP), BX; \
	MOVQ step+40(FP), R9; \
	MOVQ tabs+64(FP), AX

// ROWSTART begins a row: DI and SI at its starts, CX its groups.
#define ROWSTART \
	MOVQ R12, DI; \
	MOVQ R14, SI; \
	MOVQ groups+24(FP), CX

// NEXTROW moves the starts on by the strides and jumps to L while rows
// remain.
#define NEXTROW(L) \
	ADDQ dstStride+48(FP), R12; \
	ADDQ rowStride+56(FP), R14; \
	DECQ BX; \
	JNZ  L

// SPREAD leaves in Y4 one byte per pixel of the 32 pixels whose bits are
// the 4 bytes at (P), 0xFF where the pixel's bit is set: Y8 and Y9 hold
// the shuffle and bits of a spreadTables.
#define SPREAD(P) \
	VPBROADCASTD P, Y4; \
	VPSHUFB Y8, Y4, Y4; \
	VPAND Y9, Y4, Y4; \
	VPCMPEQB Y9, Y4, Y4

// PLANE shifts the code bytes in A left by one bit and adds the bits of
// the plane at R8, then moves R8 to the next plane.
#define PLANE(A) \
	SPREAD((R8)); \
	VPADDB A, A, A; \
	VPSUBB Y4, A, A; \
	ADDQ DX, R8

// WIDEN stores the 32 bytes in A (XA its low half) as 32 words at (DI);
// it needs Y5.
#define WIDEN(A, XA) \
	VPMOVZXBW XA, Y5; \
	VMOVDQU Y5, (DI); \
	VEXTRACTI128 $1, A, X5; \
	VPMOVZXBW X5, Y5; \
	VMOVDQU Y5, 32(DI)

// func bits1AVX2(dst, row *byte, planeBytes, groups, rows, step, dstStride, rowStride int, tabs *spreadTables)
TEXT ·bits1AVX2(SB), NOSPLIT, $0-72
	ARGS
	MOVQ groups+24(FP), CX
	TESTQ CX, CX
	JZ   b1done
	TESTQ BX, BX
	JZ   b1done
	VMOVDQU (AX), Y8
	VMOVDQU 64(AX), Y9
	VPCMPEQB Y10, Y10, Y10
	VPABSB Y10, Y10 // 1 in each byte

b1row:
	ROWSTART

b1loop:
	SPREAD((SI))
	VPAND Y10, Y4, Y4
	WIDEN(Y4, X4)
	ADDQ $4, SI
	ADDQ R9, DI
	DECQ CX
	JNZ  b1loop
	NEXTROW(b1row)
	VZEROUPPER

b1done:
	RET

// func bits6AVX2(dst, row *byte, planeBytes, groups, rows, step, dstStride, rowStride int, tabs *spreadTables, lut *[64]byte)
//
// The LFSR look-up: four shuffles give the entries of the code's low
// nibble in each 16-entry quarter of the table, and blends on bits 4 and 5
// of the code pick one.
TEXT ·bits6AVX2(SB), NOSPLIT, $0-80
	ARGS
	MOVQ lut+72(FP), R13
	MOVQ groups+24(FP), CX
	TESTQ CX, CX
	JZ   b6done
	TESTQ BX, BX
	JZ   b6done
	VMOVDQU (AX), Y8
	VMOVDQU 64(AX), Y9
	TESTQ R13, R13
	JZ   b6row
	VBROADCASTI128 0(R13), Y11
	VBROADCASTI128 16(R13), Y12
	VBROADCASTI128 32(R13), Y13
	VBROADCASTI128 48(R13), Y14
	MOVQ $0x0F0F0F0F0F0F0F0F, AX
	MOVQ AX, X15
	VPBROADCASTQ X15, Y15

b6row:
	ROWSTART

b6loop:
	MOVQ SI, R8
	VPXOR Y0, Y0, Y0
	PLANE(Y0); PLANE(Y0); PLANE(Y0)
	PLANE(Y0); PLANE(Y0); PLANE(Y0)
	TESTQ R13, R13
	JZ   b6store
	VPAND Y15, Y0, Y1
	VPSHUFB Y1, Y11, Y2
	VPSHUFB Y1, Y12, Y3
	VPSHUFB Y1, Y13, Y6
	VPSHUFB Y1, Y14, Y7
	VPSLLW $3, Y0, Y1 // bit 4 of each code to bit 7
	VPBLENDVB Y1, Y3, Y2, Y2
	VPBLENDVB Y1, Y7, Y6, Y6
	VPSLLW $2, Y0, Y1 // bit 5
	VPBLENDVB Y1, Y6, Y2, Y0

b6store:
	WIDEN(Y0, X0)
	ADDQ $4, SI
	ADDQ R9, DI
	DECQ CX
	JNZ  b6loop
	NEXTROW(b6row)
	VZEROUPPER

b6done:
	RET

// LOOKUP16 turns the 16 12-bit codes in W (XW its low half) into counts
// through the table at R13 (lfsr12 widened to 32 bits): two 8-wide
// gathers, packed back into words (the pack works within lanes; a qword
// permute puts them in order). It needs Y2, Y3, Y5, Y6 and Y7.
#define LOOKUP16(W, XW) \
	VPMOVZXWD XW, Y2; \
	VPCMPEQD Y5, Y5, Y5; \
	VPXOR Y6, Y6, Y6; \
	VPGATHERDD Y5, (R13)(Y2*4), Y6; \
	VEXTRACTI128 $1, W, X3; \
	VPMOVZXWD X3, Y3; \
	VPCMPEQD Y5, Y5, Y5; \
	VPXOR Y7, Y7, Y7; \
	VPGATHERDD Y5, (R13)(Y3*4), Y7; \
	VPACKUSDW Y7, Y6, W; \
	VPERMQ $0xD8, W, W

// func bits12AVX2(dst, row *byte, planeBytes, groups, rows, step, dstStride, rowStride int, tabs *spreadTables, lut *[4096]uint32)
//
// Planes 0-7 make the high code byte in Y0, planes 8-11 the low nibble in
// Y1; bytes are pixels in image order, within each 128-bit lane, so the
// unpacks into words leave pixels 0-7 and 16-23 in one vector, 8-15 and
// 24-31 in the other, and two lane permutes put them in order.
TEXT ·bits12AVX2(SB), NOSPLIT, $0-80
	ARGS
	MOVQ lut+72(FP), R13
	MOVQ groups+24(FP), CX
	TESTQ CX, CX
	JZ   b12done
	TESTQ BX, BX
	JZ   b12done
	VMOVDQU (AX), Y8
	VMOVDQU 64(AX), Y9

b12row:
	ROWSTART

b12loop:
	MOVQ SI, R8
	VPXOR Y0, Y0, Y0
	PLANE(Y0); PLANE(Y0); PLANE(Y0); PLANE(Y0)
	PLANE(Y0); PLANE(Y0); PLANE(Y0); PLANE(Y0)
	VPXOR Y1, Y1, Y1
	PLANE(Y1); PLANE(Y1); PLANE(Y1); PLANE(Y1)
	VPSLLW $4, Y1, Y1 // the nibble to bits 7-4 (each byte is under 16)
	VPUNPCKLBW Y0, Y1, Y2
	VPUNPCKHBW Y0, Y1, Y3
	VPSRLW $4, Y2, Y2
	VPSRLW $4, Y3, Y3
	VPERM2I128 $0x20, Y3, Y2, Y0 // pixels 0-15
	VPERM2I128 $0x31, Y3, Y2, Y1 // pixels 16-31
	TESTQ R13, R13
	JZ   b12store
	LOOKUP16(Y0, X0)
	LOOKUP16(Y1, X1)

b12store:
	VMOVDQU Y0, (DI)
	VMOVDQU Y1, 32(DI)
	ADDQ $4, SI
	ADDQ R9, DI
	DECQ CX
	JNZ  b12loop
	NEXTROW(b12row)
	VZEROUPPER

b12done:
	RET

// func bits1AVX512(dst, row *byte, planeBytes, groups, rows, step, dstStride, rowStride int, tabs *spreadTables)
TEXT ·bits1AVX512(SB), NOSPLIT, $0-72
	ARGS
	MOVQ groups+24(FP), CX
	TESTQ CX, CX
	JZ   w1done
	TESTQ BX, BX
	JZ   w1done
	VMOVDQU64 (AX), Z8
	VMOVDQU64 64(AX), Z9
	VPTERNLOGD $0xFF, Z10, Z10, Z10
	VPSRLW $15, Z10, Z10 // 1 in each word

w1row:
	ROWSTART

w1loop:
	VPBROADCASTQ (SI), Z0
	VPSHUFB Z8, Z0, Z0
	VPTESTMB Z9, Z0, K1
	KSHIFTRQ $32, K1, K2
	VMOVDQU16.Z Z10, K1, Z1
	VMOVDQU16.Z Z10, K2, Z2
	VMOVDQU64 Z1, (DI)
	VMOVDQU64 Z2, 64(DI)
	ADDQ $8, SI
	ADDQ R9, DI
	DECQ CX
	JNZ  w1loop
	NEXTROW(w1row)
	VZEROUPPER

w1done:
	RET

// func bits6GFNI(dst, row *byte, planeBytes, groups, rows, step, dstStride, rowStride int, tabs *gfni6Tables, lut *[64]byte)
TEXT ·bits6GFNI(SB), NOSPLIT, $0-80
	ARGS
	MOVQ lut+72(FP), R13
	MOVQ groups+24(FP), CX
	TESTQ CX, CX
	JZ   w6done
	TESTQ BX, BX
	JZ   w6done
	LEAQ (DX)(DX*2), R10
	LEAQ (DX)(DX*4), R11
	VMOVDQU64 (AX), Z24
	VMOVDQU64 64(AX), Z25
	VPBROADCASTQ 128(AX), Z23
	TESTQ R13, R13
	JZ   w6row
	VMOVDQU64 (R13), Z22

w6row:
	ROWSTART

w6loop:
	VMOVDQU64 (SI), X20
	VINSERTI32X4 $1, (SI)(DX*1), Z20, Z20
	VINSERTI32X4 $2, (SI)(DX*2), Z20, Z20
	VINSERTI32X4 $3, (SI)(R10*1), Z20, Z20
	VMOVDQU64 (SI)(DX*4), X21 // planes 4 and 5; the upper half zero
	VINSERTI32X4 $1, (SI)(R11*1), Z21, Z21
	VMOVDQU64 Z24, Z0
	VPERMI2B Z21, Z20, Z0
	VGF2P8AFFINEQB $0, Z0, Z23, Z0
	VMOVDQU64 Z25, Z1
	VPERMI2B Z21, Z20, Z1
	VGF2P8AFFINEQB $0, Z1, Z23, Z1
	TESTQ R13, R13
	JZ   w6store
	VPERMB Z22, Z0, Z0
	VPERMB Z22, Z1, Z1

w6store:
	VPMOVZXBW Y0, Z2
	VEXTRACTI64X4 $1, Z0, Y3
	VPMOVZXBW Y3, Z3
	VPMOVZXBW Y1, Z4
	VEXTRACTI64X4 $1, Z1, Y5
	VPMOVZXBW Y5, Z5
	VMOVDQU64 Z2, (DI)
	VMOVDQU64 Z3, 64(DI)
	VMOVDQU64 Z4, 128(DI)
	VMOVDQU64 Z5, 192(DI)
	ADDQ $16, SI
	ADDQ R9, DI
	DECQ CX
	JNZ  w6loop
	NEXTROW(w6row)
	VZEROUPPER

w6done:
	RET
