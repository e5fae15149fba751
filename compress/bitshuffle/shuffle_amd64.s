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
