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

// The AVX-512 gather of 24-bit codes (codes24GFNI), 256 pixels a turn:
// for each half of them and each code byte, the 16 bytes of each of its 8
// planes are loaded into two vectors, a VPERMB of both (gfniG0, gfniG1)
// puts in each qword the 8 planes' bytes of 8 pixels, and VGF2P8AFFINEQB
// transposes each qword's 8x8 bits so that byte i is pixel i's code byte
// (gfniBits: byte k of the vector is bit 7-k). Two more permutes of the
// three code bytes (gfniW*, then gfniE* with the top byte masked to zero)
// make the 32-bit codes of 64 pixels in order.
DATA gfniG0<>+0x00(SB)/8, $0x7060504030201000
DATA gfniG0<>+0x08(SB)/8, $0x7161514131211101
DATA gfniG0<>+0x10(SB)/8, $0x7262524232221202
DATA gfniG0<>+0x18(SB)/8, $0x7363534333231303
DATA gfniG0<>+0x20(SB)/8, $0x7464544434241404
DATA gfniG0<>+0x28(SB)/8, $0x7565554535251505
DATA gfniG0<>+0x30(SB)/8, $0x7666564636261606
DATA gfniG0<>+0x38(SB)/8, $0x7767574737271707
GLOBL gfniG0<>(SB), RODATA|NOPTR, $64

DATA gfniG1<>+0x00(SB)/8, $0x7868584838281808
DATA gfniG1<>+0x08(SB)/8, $0x7969594939291909
DATA gfniG1<>+0x10(SB)/8, $0x7a6a5a4a3a2a1a0a
DATA gfniG1<>+0x18(SB)/8, $0x7b6b5b4b3b2b1b0b
DATA gfniG1<>+0x20(SB)/8, $0x7c6c5c4c3c2c1c0c
DATA gfniG1<>+0x28(SB)/8, $0x7d6d5d4d3d2d1d0d
DATA gfniG1<>+0x30(SB)/8, $0x7e6e5e4e3e2e1e0e
DATA gfniG1<>+0x38(SB)/8, $0x7f6f5f4f3f2f1f0f
GLOBL gfniG1<>(SB), RODATA|NOPTR, $64

DATA gfniW0<>+0x00(SB)/8, $0x4303420241014000
DATA gfniW0<>+0x08(SB)/8, $0x4707460645054404
DATA gfniW0<>+0x10(SB)/8, $0x4b0b4a0a49094808
DATA gfniW0<>+0x18(SB)/8, $0x4f0f4e0e4d0d4c0c
DATA gfniW0<>+0x20(SB)/8, $0x5313521251115010
DATA gfniW0<>+0x28(SB)/8, $0x5717561655155414
DATA gfniW0<>+0x30(SB)/8, $0x5b1b5a1a59195818
DATA gfniW0<>+0x38(SB)/8, $0x5f1f5e1e5d1d5c1c
GLOBL gfniW0<>(SB), RODATA|NOPTR, $64

DATA gfniW1<>+0x00(SB)/8, $0x6323622261216020
DATA gfniW1<>+0x08(SB)/8, $0x6727662665256424
DATA gfniW1<>+0x10(SB)/8, $0x6b2b6a2a69296828
DATA gfniW1<>+0x18(SB)/8, $0x6f2f6e2e6d2d6c2c
DATA gfniW1<>+0x20(SB)/8, $0x7333723271317030
DATA gfniW1<>+0x28(SB)/8, $0x7737763675357434
DATA gfniW1<>+0x30(SB)/8, $0x7b3b7a3a79397838
DATA gfniW1<>+0x38(SB)/8, $0x7f3f7e3e7d3d7c3c
GLOBL gfniW1<>(SB), RODATA|NOPTR, $64

DATA gfniE0<>+0x00(SB)/8, $0x0041030200400100
DATA gfniE0<>+0x08(SB)/8, $0x0043070600420504
DATA gfniE0<>+0x10(SB)/8, $0x00450b0a00440908
DATA gfniE0<>+0x18(SB)/8, $0x00470f0e00460d0c
DATA gfniE0<>+0x20(SB)/8, $0x0049131200481110
DATA gfniE0<>+0x28(SB)/8, $0x004b1716004a1514
DATA gfniE0<>+0x30(SB)/8, $0x004d1b1a004c1918
DATA gfniE0<>+0x38(SB)/8, $0x004f1f1e004e1d1c
GLOBL gfniE0<>(SB), RODATA|NOPTR, $64

DATA gfniE1<>+0x00(SB)/8, $0x0051232200502120
DATA gfniE1<>+0x08(SB)/8, $0x0053272600522524
DATA gfniE1<>+0x10(SB)/8, $0x00552b2a00542928
DATA gfniE1<>+0x18(SB)/8, $0x00572f2e00562d2c
DATA gfniE1<>+0x20(SB)/8, $0x0059333200583130
DATA gfniE1<>+0x28(SB)/8, $0x005b3736005a3534
DATA gfniE1<>+0x30(SB)/8, $0x005d3b3a005c3938
DATA gfniE1<>+0x38(SB)/8, $0x005f3f3e005e3d3c
GLOBL gfniE1<>(SB), RODATA|NOPTR, $64

DATA gfniE2<>+0x00(SB)/8, $0x0061030200600100
DATA gfniE2<>+0x08(SB)/8, $0x0063070600620504
DATA gfniE2<>+0x10(SB)/8, $0x00650b0a00640908
DATA gfniE2<>+0x18(SB)/8, $0x00670f0e00660d0c
DATA gfniE2<>+0x20(SB)/8, $0x0069131200681110
DATA gfniE2<>+0x28(SB)/8, $0x006b1716006a1514
DATA gfniE2<>+0x30(SB)/8, $0x006d1b1a006c1918
DATA gfniE2<>+0x38(SB)/8, $0x006f1f1e006e1d1c
GLOBL gfniE2<>(SB), RODATA|NOPTR, $64

DATA gfniE3<>+0x00(SB)/8, $0x0071232200702120
DATA gfniE3<>+0x08(SB)/8, $0x0073272600722524
DATA gfniE3<>+0x10(SB)/8, $0x00752b2a00742928
DATA gfniE3<>+0x18(SB)/8, $0x00772f2e00762d2c
DATA gfniE3<>+0x20(SB)/8, $0x0079333200783130
DATA gfniE3<>+0x28(SB)/8, $0x007b3736007a3534
DATA gfniE3<>+0x30(SB)/8, $0x007d3b3a007c3938
DATA gfniE3<>+0x38(SB)/8, $0x007f3f3e007e3d3c
GLOBL gfniE3<>(SB), RODATA|NOPTR, $64
DATA gfniBits<>+0x00(SB)/8, $0x0102040810204080
GLOBL gfniBits<>(SB), RODATA|NOPTR, $8

// BYTES16 loads the 16 bytes at R8 of each of the 8 planes from R8 (plane
// stride DX; R10 = 3*DX, R11 = 5*DX, R12 = 7*DX) into Z20 (planes 0-3)
// and Z21 (planes 4-7), and leaves the code bytes of the first and second
// 64 pixels in P0 and P1.
#define BYTES16(P0, P1) \
	VMOVDQU64 (R8), X20; \
	VINSERTI32X4 $1, (R8)(DX*1), Z20, Z20; \
	VINSERTI32X4 $2, (R8)(DX*2), Z20, Z20; \
	VINSERTI32X4 $3, (R8)(R10*1), Z20, Z20; \
	VMOVDQU64 (R8)(DX*4), X21; \
	VINSERTI32X4 $1, (R8)(R11*1), Z21, Z21; \
	VINSERTI32X4 $2, (R8)(R10*2), Z21, Z21; \
	VINSERTI32X4 $3, (R8)(R12*1), Z21, Z21; \
	VMOVDQU64 Z24, P0; \
	VPERMI2B Z21, Z20, P0; \
	VGF2P8AFFINEQB $0, P0, Z23, P0; \
	VMOVDQU64 Z25, P1; \
	VPERMI2B Z21, Z20, P1; \
	VGF2P8AFFINEQB $0, P1, Z23, P1

// CODES64 stores the codes of 64 pixels, whose high, middle and low code
// bytes are in H, M and L, at OFF(DI).
#define CODES64(H, M, L, OFF) \
	VMOVDQU64 Z26, Z16; \
	VPERMI2B M, L, Z16; \
	VMOVDQU64 Z27, Z17; \
	VPERMI2B M, L, Z17; \
	VMOVDQU64 Z28, Z18; \
	VPERMI2B.Z H, Z16, K1, Z18; \
	VMOVDQU64 Z18, OFF(DI); \
	VMOVDQU64 Z29, Z18; \
	VPERMI2B.Z H, Z16, K1, Z18; \
	VMOVDQU64 Z18, OFF+64(DI); \
	VMOVDQU64 Z30, Z18; \
	VPERMI2B.Z H, Z17, K1, Z18; \
	VMOVDQU64 Z18, OFF+128(DI); \
	VMOVDQU64 Z31, Z18; \
	VPERMI2B.Z H, Z17, K1, Z18; \
	VMOVDQU64 Z18, OFF+192(DI)

// LOOKUPLO turns the 16 codes in Z18, all under 4096, into counts through
// the table at R13 (lfsr12 widened to 32 bits) and stores them at OFF(DI).
#define LOOKUPLO(OFF) \
	KXNORW K0, K0, K2; \
	VPXORD Z19, Z19, Z19; \
	VPGATHERDD (R13)(Z18*4), K2, Z19; \
	VMOVDQU64 Z19, OFF(DI)

// LOOKUP is LOOKUPLO for codes of any count: both halves looked up.
#define LOOKUP(OFF) \
	VPANDD Z14, Z18, Z19; \
	VPSRLD $12, Z18, Z22; \
	KXNORW K0, K0, K2; \
	VPXORD Z18, Z18, Z18; \
	VPGATHERDD (R13)(Z19*4), K2, Z18; \
	KXNORW K0, K0, K3; \
	VPXORD Z19, Z19, Z19; \
	VPGATHERDD (R13)(Z22*4), K3, Z19; \
	VPSLLD $12, Z19, Z19; \
	VPORD Z19, Z18, Z18; \
	VMOVDQU64 Z18, OFF(DI)

// COUNTS64 is CODES64 with the LFSR look-up LK (LOOKUP or LOOKUPLO).
#define COUNTS64(LK, H, M, L, OFF) \
	VMOVDQU64 Z26, Z16; \
	VPERMI2B M, L, Z16; \
	VMOVDQU64 Z27, Z17; \
	VPERMI2B M, L, Z17; \
	VMOVDQU64 Z28, Z18; \
	VPERMI2B.Z H, Z16, K1, Z18; \
	LK(OFF); \
	VMOVDQU64 Z29, Z18; \
	VPERMI2B.Z H, Z16, K1, Z18; \
	LK(OFF+64); \
	VMOVDQU64 Z30, Z18; \
	VPERMI2B.Z H, Z17, K1, Z18; \
	LK(OFF+128); \
	VMOVDQU64 Z31, Z18; \
	VPERMI2B.Z H, Z17, K1, Z18; \
	LK(OFF+192)

// HIGHZERO sets the flags to ZF where every code of the 128 pixels whose
// code bytes are in H0, H1 (high) and M0, M1 (middle) is under 4096.
#define HIGHZERO(H0, H1, M0, M1) \
	VPORQ H1, H0, Z6; \
	VPORQ M1, M0, Z7; \
	VPTERNLOGQ $0xF8, Z13, Z7, Z6; \
	VPTESTMQ Z6, Z6, K3; \
	KORTESTB K3, K3

// func codes24GFNI(dst *uint32, row *byte, planeBytes, blocks, rows, dstStride, rowStride int, table *[4096]uint32)
//
// rows chip rows, each of blocks*256 pixels: the codes of a row go to dst,
// the next row's dstStride bytes on, read from row, the next rowStride
// bytes on. With a table, each 16 codes are looked up as they are made,
// before they are stored; the high halves only for runs of 128 pixels
// where some code is 4096 or more (at short exposures, none is).
TEXT ·codes24GFNI(SB), NOSPLIT, $0-64
	MOVQ dst+0(FP), DI
	MOVQ row+8(FP), SI
	MOVQ planeBytes+16(FP), DX
	MOVQ blocks+24(FP), CX
	MOVQ rows+32(FP), BX
	MOVQ table+56(FP), R13
	TESTQ CX, CX
	JZ   gfnidone
	TESTQ BX, BX
	JZ   gfnidone
	LEAQ (DX)(DX*2), R10
	LEAQ (DX)(DX*4), R11
	LEAQ (R10)(DX*4), R12
	MOVQ DX, R9
	SHLQ $3, R9 // 8 planes: one code byte
	VPBROADCASTQ gfniBits<>(SB), Z23
	VMOVDQU64 gfniG0<>(SB), Z24
	VMOVDQU64 gfniG1<>(SB), Z25
	VMOVDQU64 gfniW0<>(SB), Z26
	VMOVDQU64 gfniW1<>(SB), Z27
	VMOVDQU64 gfniE0<>(SB), Z28
	VMOVDQU64 gfniE1<>(SB), Z29
	VMOVDQU64 gfniE2<>(SB), Z30
	VMOVDQU64 gfniE3<>(SB), Z31
	VPTERNLOGD $0xFF, Z14, Z14, Z14
	VPSRLD $20, Z14, Z14 // 0xFFF in each dword
	MOVQ $0xF0F0F0F0F0F0F0F0, AX
	VPBROADCASTQ AX, Z13 // a middle code byte's part of the high half
	MOVQ $0x7777777777777777, AX
	KMOVQ AX, K1

	TESTQ R13, R13
	JNZ  gfnilfsr

gfniloop:
	MOVQ SI, R8
	BYTES16(Z0, Z1)    // bits 23-16, pixels 0-127
	ADDQ R9, R8
	BYTES16(Z2, Z3)    // bits 15-8
	ADDQ R9, R8
	BYTES16(Z4, Z5)    // bits 7-0
	CODES64(Z0, Z2, Z4, 0)
	CODES64(Z1, Z3, Z5, 256)
	LEAQ 16(SI), R8
	BYTES16(Z0, Z1)    // pixels 128-255
	ADDQ R9, R8
	BYTES16(Z2, Z3)
	ADDQ R9, R8
	BYTES16(Z4, Z5)
	CODES64(Z0, Z2, Z4, 512)
	CODES64(Z1, Z3, Z5, 768)
	ADDQ $32, SI
	ADDQ $1024, DI
	DECQ CX
	JNZ  gfniloop

	// The next row: back to the row's start, then on by the strides.
	DECQ BX
	JZ   gfniend
	MOVQ blocks+24(FP), CX
	MOVQ CX, AX
	SHLQ $10, AX
	SUBQ AX, DI
	ADDQ dstStride+40(FP), DI
	MOVQ CX, AX
	SHLQ $5, AX
	SUBQ AX, SI
	ADDQ rowStride+48(FP), SI
	JMP  gfniloop

gfnilfsr:
	MOVQ SI, R8
	BYTES16(Z0, Z1)
	ADDQ R9, R8
	BYTES16(Z2, Z3)
	ADDQ R9, R8
	BYTES16(Z4, Z5)
	HIGHZERO(Z0, Z1, Z2, Z3)
	JNZ  gfnihigh0
	COUNTS64(LOOKUPLO, Z0, Z2, Z4, 0)
	COUNTS64(LOOKUPLO, Z1, Z3, Z5, 256)
	JMP  gfnihalf

gfnihigh0:
	COUNTS64(LOOKUP, Z0, Z2, Z4, 0)
	COUNTS64(LOOKUP, Z1, Z3, Z5, 256)

gfnihalf:
	LEAQ 16(SI), R8
	BYTES16(Z0, Z1)
	ADDQ R9, R8
	BYTES16(Z2, Z3)
	ADDQ R9, R8
	BYTES16(Z4, Z5)
	HIGHZERO(Z0, Z1, Z2, Z3)
	JNZ  gfnihigh1
	COUNTS64(LOOKUPLO, Z0, Z2, Z4, 512)
	COUNTS64(LOOKUPLO, Z1, Z3, Z5, 768)
	JMP  gfnilfsrnext

gfnihigh1:
	COUNTS64(LOOKUP, Z0, Z2, Z4, 512)
	COUNTS64(LOOKUP, Z1, Z3, Z5, 768)

gfnilfsrnext:
	ADDQ $32, SI
	ADDQ $1024, DI
	DECQ CX
	JNZ  gfnilfsr

	// The next row: back to the row's start, then on by the strides.
	DECQ BX
	JZ   gfniend
	MOVQ blocks+24(FP), CX
	MOVQ CX, AX
	SHLQ $10, AX
	SUBQ AX, DI
	ADDQ dstStride+40(FP), DI
	MOVQ CX, AX
	SHLQ $5, AX
	SUBQ AX, SI
	ADDQ rowStride+48(FP), SI
	JMP  gfnilfsr

gfniend:
	VZEROUPPER

gfnidone:
	RET

// func lfsr24AVX512(codes *uint32, groups int, table *[4096]uint32)
//
// lfsr24AVX2 with AVX-512 gathers: sixteen codes at a time, the look-up
// of the high halves skipped when all sixteen are code 0.
TEXT ·lfsr24AVX512(SB), NOSPLIT, $0-24
	MOVQ codes+0(FP), DI
	MOVQ groups+8(FP), CX
	MOVQ table+16(FP), SI
	TESTQ CX, CX
	JZ lfsr512done
	VPTERNLOGD $0xFF, Z15, Z15, Z15
	VPSRLD $20, Z15, Z14 // 0xFFF in each dword

lfsr512loop:
	VMOVDQU32 (DI), Z0
	VPANDD Z14, Z0, Z1
	VPSRLD $12, Z0, Z2
	VPANDD Z14, Z2, Z2
	KXNORW K0, K0, K2
	VPXORD Z4, Z4, Z4
	VPGATHERDD (SI)(Z1*4), K2, Z4
	VPTESTMD Z2, Z2, K3
	KORTESTW K3, K3
	JZ lfsr512store
	KXNORW K0, K0, K4
	VPXORD Z6, Z6, Z6
	VPGATHERDD (SI)(Z2*4), K4, Z6
	VPSLLD $12, Z6, Z6
	VPORD Z6, Z4, Z4

lfsr512store:
	VMOVDQU32 Z4, (DI)
	ADDQ $64, DI
	DECQ CX
	JNZ lfsr512loop
	VZEROUPPER

lfsr512done:
	RET

// The AVX-512 gather of 12-bit codes (codes12GFNI), 256 pixels a turn:
// BYTES16 makes the high code bytes (planes 0-7, bits 11-4) and BYTES4 the
// low nibbles (planes 8-11, as bits 7-4 of a byte) of 128 pixels each;
// the gfniW permutes interleave them into words, which a shift right by 4
// makes the codes.

// BYTES4 is BYTES16 for the 4 planes at R8, Z22 (zero) standing for the
// other 4: the code nibbles land in bits 7-4 of the bytes in P0 and P1.
#define BYTES4(P0, P1) \
	VMOVDQU64 (R8), X20; \
	VINSERTI32X4 $1, (R8)(DX*1), Z20, Z20; \
	VINSERTI32X4 $2, (R8)(DX*2), Z20, Z20; \
	VINSERTI32X4 $3, (R8)(R10*1), Z20, Z20; \
	VMOVDQU64 Z24, P0; \
	VPERMI2B Z22, Z20, P0; \
	VGF2P8AFFINEQB $0, P0, Z23, P0; \
	VMOVDQU64 Z25, P1; \
	VPERMI2B Z22, Z20, P1; \
	VGF2P8AFFINEQB $0, P1, Z23, P1

// WORDS64 leaves in Z16 and Z17 the 12-bit codes of 64 pixels, pixels
// 0-31 and 32-63, whose high bytes are in A and low nibbles (bits 7-4)
// in B.
#define WORDS64(A, B) \
	VMOVDQU64 Z26, Z16; \
	VPERMI2B A, B, Z16; \
	VMOVDQU64 Z27, Z17; \
	VPERMI2B A, B, Z17; \
	VPSRLW $4, Z16, Z16; \
	VPSRLW $4, Z17, Z17

// STORE32 stores the 32 codes in W (Y its low half) at OFF(DI).
#define STORE32(W, Y, OFF) \
	VMOVDQU64 W, OFF(DI)

// COUNT32 looks up the 32 codes in W (Y its low half) in the table at R13
// (lfsr12 widened to 32 bits), sixteen at a time, and stores the counts at
// OFF(DI).
#define COUNT32(W, Y, OFF) \
	VPMOVZXWD Y, Z18; \
	KXNORW K0, K0, K2; \
	VPXORD Z19, Z19, Z19; \
	VPGATHERDD (R13)(Z18*4), K2, Z19; \
	VEXTRACTI64X4 $1, W, Y18; \
	VPMOVZXWD Y18, Z18; \
	KXNORW K0, K0, K3; \
	VPXORD Z15, Z15, Z15; \
	VPGATHERDD (R13)(Z18*4), K3, Z15; \
	VPMOVDW Z19, Y19; \
	VPMOVDW Z15, Y15; \
	VINSERTI64X4 $1, Y15, Z19, Z19; \
	VMOVDQU64 Z19, OFF(DI)

// BLOCK12 decodes the 256 pixels of one block at SI into OFF(DI), each 32
// codes through OUT (STORE32 or COUNT32).
#define BLOCK12(OUT) \
	MOVQ SI, R8; \
	BYTES16(Z0, Z1); \
	ADDQ R9, R8; \
	BYTES4(Z2, Z3); \
	LEAQ 16(SI), R8; \
	BYTES16(Z4, Z5); \
	ADDQ R9, R8; \
	BYTES4(Z6, Z7); \
	WORDS64(Z0, Z2); \
	OUT(Z16, Y16, 0); \
	OUT(Z17, Y17, 64); \
	WORDS64(Z1, Z3); \
	OUT(Z16, Y16, 128); \
	OUT(Z17, Y17, 192); \
	WORDS64(Z4, Z6); \
	OUT(Z16, Y16, 256); \
	OUT(Z17, Y17, 320); \
	WORDS64(Z5, Z7); \
	OUT(Z16, Y16, 384); \
	OUT(Z17, Y17, 448)

// func codes12GFNI(dst *uint16, row *byte, planeBytes, blocks, rows, dstStride, rowStride int, table *[4096]uint32)
//
// codes24GFNI for 12 planes and 16-bit pixels: rows chip rows of
// blocks*256 pixels, looked up in table where it is not nil.
TEXT ·codes12GFNI(SB), NOSPLIT, $0-64
	MOVQ dst+0(FP), DI
	MOVQ row+8(FP), SI
	MOVQ planeBytes+16(FP), DX
	MOVQ blocks+24(FP), CX
	MOVQ rows+32(FP), BX
	MOVQ table+56(FP), R13
	TESTQ CX, CX
	JZ   g12done
	TESTQ BX, BX
	JZ   g12done
	LEAQ (DX)(DX*2), R10
	LEAQ (DX)(DX*4), R11
	LEAQ (R10)(DX*4), R12
	MOVQ DX, R9
	SHLQ $3, R9 // 8 planes
	VPBROADCASTQ gfniBits<>(SB), Z23
	VMOVDQU64 gfniG0<>(SB), Z24
	VMOVDQU64 gfniG1<>(SB), Z25
	VMOVDQU64 gfniW0<>(SB), Z26
	VMOVDQU64 gfniW1<>(SB), Z27
	VPXORQ Z22, Z22, Z22
	TESTQ R13, R13
	JNZ  g12lfsr

g12loop:
	BLOCK12(STORE32)
	ADDQ $32, SI
	ADDQ $512, DI
	DECQ CX
	JNZ  g12loop

	// The next row: back to the row's start, then on by the strides.
	DECQ BX
	JZ   g12end
	MOVQ blocks+24(FP), CX
	MOVQ CX, AX
	SHLQ $9, AX
	SUBQ AX, DI
	ADDQ dstStride+40(FP), DI
	MOVQ CX, AX
	SHLQ $5, AX
	SUBQ AX, SI
	ADDQ rowStride+48(FP), SI
	JMP  g12loop

g12lfsr:
	BLOCK12(COUNT32)
	ADDQ $32, SI
	ADDQ $512, DI
	DECQ CX
	JNZ  g12lfsr

	DECQ BX
	JZ   g12end
	MOVQ blocks+24(FP), CX
	MOVQ CX, AX
	SHLQ $9, AX
	SUBQ AX, DI
	ADDQ dstStride+40(FP), DI
	MOVQ CX, AX
	SHLQ $5, AX
	SUBQ AX, SI
	ADDQ rowStride+48(FP), SI
	JMP  g12lfsr

g12end:
	VZEROUPPER

g12done:
	RET
