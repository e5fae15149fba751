#include "textflag.h"

// Byte gather within each 128-bit lane: the 4 elements' byte 0, then byte
// 1, byte 2 and byte 3, one dword each.
DATA gather4<>+0x00(SB)/8, $0x0d0905010c080400
DATA gather4<>+0x08(SB)/8, $0x0f0b07030e0a0602
DATA gather4<>+0x10(SB)/8, $0x0d0905010c080400
DATA gather4<>+0x18(SB)/8, $0x0f0b07030e0a0602
GLOBL gather4<>(SB), RODATA|NOPTR, $32

// Dword order that puts 4-element runs back in element order after the
// in-lane 4x4 dword transpose.
DATA order4<>+0x00(SB)/8, $0x0000000400000000
DATA order4<>+0x08(SB)/8, $0x0000000500000001
DATA order4<>+0x10(SB)/8, $0x0000000600000002
DATA order4<>+0x18(SB)/8, $0x0000000700000003
GLOBL order4<>(SB), RODATA|NOPTR, $32

// ROWS8 stores the 8 bit rows of the byte vector V, most significant bit
// first, at rows 7 down to 0 from BX (row stride DX; R10 = 3*DX,
// R11 = 5*DX, R12 = 7*DX), then moves BX on by 8 rows.
#define ROWS8(V) \
	VPMOVMSKB V, AX; MOVL AX, (BX)(R12*1); VPADDB V, V, V; \
	VPMOVMSKB V, AX; MOVL AX, (BX)(R10*2); VPADDB V, V, V; \
	VPMOVMSKB V, AX; MOVL AX, (BX)(R11*1); VPADDB V, V, V; \
	VPMOVMSKB V, AX; MOVL AX, (BX)(DX*4); VPADDB V, V, V; \
	VPMOVMSKB V, AX; MOVL AX, (BX)(R10*1); VPADDB V, V, V; \
	VPMOVMSKB V, AX; MOVL AX, (BX)(DX*2); VPADDB V, V, V; \
	VPMOVMSKB V, AX; MOVL AX, (BX)(DX*1); VPADDB V, V, V; \
	VPMOVMSKB V, AX; MOVL AX, (BX); \
	ADDQ R13, BX

// func shuffle4AVX2(dst, src *byte, rowBytes, groups int)
TEXT ·shuffle4AVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ rowBytes+16(FP), DX
	MOVQ groups+24(FP), CX
	TESTQ CX, CX
	JZ   done
	LEAQ (DX)(DX*2), R10
	LEAQ (DX)(DX*4), R11
	LEAQ (R10)(DX*4), R12
	MOVQ DX, R13
	SHLQ $3, R13
	VMOVDQU gather4<>(SB), Y8
	VMOVDQU order4<>(SB), Y9

loop:
	VMOVDQU 0(SI), Y0
	VMOVDQU 32(SI), Y1
	VMOVDQU 64(SI), Y2
	VMOVDQU 96(SI), Y3
	VPSHUFB Y8, Y0, Y0
	VPSHUFB Y8, Y1, Y1
	VPSHUFB Y8, Y2, Y2
	VPSHUFB Y8, Y3, Y3
	VPUNPCKLDQ Y1, Y0, Y4
	VPUNPCKHDQ Y1, Y0, Y5
	VPUNPCKLDQ Y3, Y2, Y6
	VPUNPCKHDQ Y3, Y2, Y7
	VPUNPCKLQDQ Y6, Y4, Y0
	VPUNPCKHQDQ Y6, Y4, Y1
	VPUNPCKLQDQ Y7, Y5, Y2
	VPUNPCKHQDQ Y7, Y5, Y3
	VPERMD Y0, Y9, Y0
	VPERMD Y1, Y9, Y1
	VPERMD Y2, Y9, Y2
	VPERMD Y3, Y9, Y3
	MOVQ DI, BX
	ROWS8(Y0)
	ROWS8(Y1)
	ROWS8(Y2)
	ROWS8(Y3)
	ADDQ $128, SI
	ADDQ $4, DI
	DECQ CX
	JNZ  loop
	VZEROUPPER

done:
	RET

// The AVX-512 transpose of 256 4-byte elements at a time (shuffle4GFNI).
// gather64 puts, in each 128-bit lane of a vector of 16 elements, byte b
// of the elements in lane b, each run of 8 elements in reverse order: the
// order in which VGF2P8AFFINEQB, with the data as its matrix and planes as
// its vector, transposes each 8x8 bit matrix so that byte j of a qword is
// bit plane j. rows8 then gathers byte j of each qword into qword j, and
// qlo and qhi interleave the qwords of 4 such vectors into 32-byte rows.
DATA gather64<>+0x00(SB)/8, $0x0004080c1014181c
DATA gather64<>+0x08(SB)/8, $0x2024282c3034383c
DATA gather64<>+0x10(SB)/8, $0x0105090d1115191d
DATA gather64<>+0x18(SB)/8, $0x2125292d3135393d
DATA gather64<>+0x20(SB)/8, $0x02060a0e12161a1e
DATA gather64<>+0x28(SB)/8, $0x22262a2e32363a3e
DATA gather64<>+0x30(SB)/8, $0x03070b0f13171b1f
DATA gather64<>+0x38(SB)/8, $0x23272b2f33373b3f
GLOBL gather64<>(SB), RODATA|NOPTR, $64

DATA rows8<>+0x00(SB)/8, $0x3830282018100800
DATA rows8<>+0x08(SB)/8, $0x3931292119110901
DATA rows8<>+0x10(SB)/8, $0x3a322a221a120a02
DATA rows8<>+0x18(SB)/8, $0x3b332b231b130b03
DATA rows8<>+0x20(SB)/8, $0x3c342c241c140c04
DATA rows8<>+0x28(SB)/8, $0x3d352d251d150d05
DATA rows8<>+0x30(SB)/8, $0x3e362e261e160e06
DATA rows8<>+0x38(SB)/8, $0x3f372f271f170f07
GLOBL rows8<>(SB), RODATA|NOPTR, $64

DATA planes<>+0x00(SB)/8, $0x8040201008040201
GLOBL planes<>(SB), RODATA|NOPTR, $8

DATA qlo<>+0x00(SB)/8, $0
DATA qlo<>+0x08(SB)/8, $1
DATA qlo<>+0x10(SB)/8, $8
DATA qlo<>+0x18(SB)/8, $9
DATA qlo<>+0x20(SB)/8, $2
DATA qlo<>+0x28(SB)/8, $3
DATA qlo<>+0x30(SB)/8, $10
DATA qlo<>+0x38(SB)/8, $11
GLOBL qlo<>(SB), RODATA|NOPTR, $64

DATA qhi<>+0x00(SB)/8, $4
DATA qhi<>+0x08(SB)/8, $5
DATA qhi<>+0x10(SB)/8, $12
DATA qhi<>+0x18(SB)/8, $13
DATA qhi<>+0x20(SB)/8, $6
DATA qhi<>+0x28(SB)/8, $7
DATA qhi<>+0x30(SB)/8, $14
DATA qhi<>+0x38(SB)/8, $15
GLOBL qhi<>(SB), RODATA|NOPTR, $64

// GATHER loads the 64 elements at OFF(SI) and leaves byte b of them, in
// the order above, in B0, B1, B2, B3.
#define GATHER(OFF, B0, B1, B2, B3) \
	VPERMB OFF+0(SI), Z28, Z16; \
	VPERMB OFF+64(SI), Z28, Z17; \
	VPERMB OFF+128(SI), Z28, Z18; \
	VPERMB OFF+192(SI), Z28, Z19; \
	VSHUFI64X2 $0x44, Z17, Z16, Z20; \
	VSHUFI64X2 $0xEE, Z17, Z16, Z21; \
	VSHUFI64X2 $0x44, Z19, Z18, Z22; \
	VSHUFI64X2 $0xEE, Z19, Z18, Z23; \
	VSHUFI64X2 $0x88, Z22, Z20, B0; \
	VSHUFI64X2 $0xDD, Z22, Z20, B1; \
	VSHUFI64X2 $0x88, Z23, Z21, B2; \
	VSHUFI64X2 $0xDD, Z23, Z21, B3

// PLANES turns B (byte b of 64 elements) into R: qword j holds the 8
// bytes of bit plane 8b+j.
#define PLANES(B) \
	VGF2P8AFFINEQB $0, B, Z30, B; \
	VPERMB B, Z29, B

// ROWS32 stores the planes of byte b of the 4 groups of 64 elements (R0 to
// R3, group order) as 32 bytes of each of the rows 0 to 7 from BX (row
// stride DX; R10 = 3*DX, R11 = 5*DX, R12 = 7*DX), then moves BX on by 8
// rows.
#define ROWS32(R0, R1, R2, R3) \
	PLANES(R0); PLANES(R1); PLANES(R2); PLANES(R3); \
	VPUNPCKLQDQ R1, R0, Z16; \
	VPUNPCKHQDQ R1, R0, Z17; \
	VPUNPCKLQDQ R3, R2, Z18; \
	VPUNPCKHQDQ R3, R2, Z19; \
	VMOVDQU64 Z26, Z20; VPERMI2Q Z18, Z16, Z20; \
	VMOVDQU64 Z27, Z21; VPERMI2Q Z18, Z16, Z21; \
	VMOVDQU64 Z26, Z22; VPERMI2Q Z19, Z17, Z22; \
	VMOVDQU64 Z27, Z23; VPERMI2Q Z19, Z17, Z23; \
	VMOVDQU64 Y20, (BX); \
	VEXTRACTI64X4 $1, Z20, (BX)(DX*2); \
	VMOVDQU64 Y21, (BX)(DX*4); \
	VEXTRACTI64X4 $1, Z21, (BX)(R10*2); \
	VMOVDQU64 Y22, (BX)(DX*1); \
	VEXTRACTI64X4 $1, Z22, (BX)(R10*1); \
	VMOVDQU64 Y23, (BX)(R11*1); \
	VEXTRACTI64X4 $1, Z23, (BX)(R12*1); \
	ADDQ R13, BX

// func shuffle4GFNI(dst, src *byte, rowBytes, groups int)
TEXT ·shuffle4GFNI(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ rowBytes+16(FP), DX
	MOVQ groups+24(FP), CX
	TESTQ CX, CX
	JZ   done512
	LEAQ (DX)(DX*2), R10
	LEAQ (DX)(DX*4), R11
	LEAQ (R10)(DX*4), R12
	MOVQ DX, R13
	SHLQ $3, R13
	VMOVDQU64 gather64<>(SB), Z28
	VMOVDQU64 rows8<>(SB), Z29
	VPBROADCASTQ planes<>(SB), Z30
	VMOVDQU64 qlo<>(SB), Z26
	VMOVDQU64 qhi<>(SB), Z27

loop512:
	GATHER(0, Z0, Z1, Z2, Z3)
	GATHER(256, Z4, Z5, Z6, Z7)
	GATHER(512, Z8, Z9, Z10, Z11)
	GATHER(768, Z12, Z13, Z14, Z15)
	MOVQ DI, BX
	ROWS32(Z0, Z4, Z8, Z12)
	ROWS32(Z1, Z5, Z9, Z13)
	ROWS32(Z2, Z6, Z10, Z14)
	ROWS32(Z3, Z7, Z11, Z15)
	ADDQ $1024, SI
	ADDQ $32, DI
	DECQ CX
	JNZ  loop512
	VZEROUPPER

done512:
	RET
