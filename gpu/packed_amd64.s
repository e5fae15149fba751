#include "textflag.h"

// The vector decodes of packed12 and packed24 and the AVX2 reverse of
// little-endian rows; packed_amd64.go says how they work and makes their
// shuffles.

// func packed12AVX512(dst, src *byte, groups, dstStep int, perm *[64]byte, mul *[32]uint16)
TEXT ·packed12AVX512(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ groups+16(FP), CX
	MOVQ dstStep+24(FP), DX
	MOVQ perm+32(FP), AX
	MOVQ mul+40(FP), BX
	TESTQ CX, CX
	JZ   p12done
	VMOVDQU64 (AX), Z8
	VMOVDQU64 (BX), Z9
	MOVQ $0xFFFFFFFFFFFF, AX // 48 bytes: one group
	KMOVQ AX, K1

p12loop:
	VMOVDQU8.Z (SI), K1, Z0
	VPERMB Z0, Z8, Z0
	VPMULLW Z9, Z0, Z0
	VPSRLW $4, Z0, Z0
	VMOVDQU64 Z0, (DI)
	ADDQ $48, SI
	ADDQ DX, DI
	DECQ CX
	JNZ  p12loop
	VZEROUPPER

p12done:
	RET

// func packed12AVX2(dst, src *byte, groups, dstStep, lane0, lane1 int, perm *[64]byte, mul *[32]uint16)
TEXT ·packed12AVX2(SB), NOSPLIT, $0-64
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ groups+16(FP), CX
	MOVQ dstStep+24(FP), DX
	MOVQ lane0+32(FP), R8
	MOVQ lane1+40(FP), R9
	MOVQ perm+48(FP), AX
	MOVQ mul+56(FP), BX
	TESTQ CX, CX
	JZ   p12x2done
	VMOVDQU (AX), Y8
	VMOVDQU (BX), Y9

p12x2loop:
	VMOVDQU (SI)(R8*1), X0
	VINSERTI128 $1, (SI)(R9*1), Y0, Y0
	VPSHUFB Y8, Y0, Y0
	VPMULLW Y9, Y0, Y0
	VPSRLW $4, Y0, Y0
	VMOVDQU Y0, (DI)
	ADDQ $24, SI
	ADDQ DX, DI
	DECQ CX
	JNZ  p12x2loop
	VZEROUPPER

p12x2done:
	RET

// func packed24AVX512(dst, src *byte, groups, dstStep int, perm *[64]byte)
TEXT ·packed24AVX512(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ groups+16(FP), CX
	MOVQ dstStep+24(FP), DX
	MOVQ perm+32(FP), AX
	TESTQ CX, CX
	JZ   p24done
	VMOVDQU64 (AX), Z8
	MOVQ $0xFFFFFFFFFFFF, AX // 48 bytes: one group
	KMOVQ AX, K1

p24loop:
	VMOVDQU8.Z (SI), K1, Z0
	VPERMB Z0, Z8, Z0
	VMOVDQU64 Z0, (DI)
	ADDQ $48, SI
	ADDQ DX, DI
	DECQ CX
	JNZ  p24loop
	VZEROUPPER

p24done:
	RET

// func packed24AVX2(dst, src *byte, groups, dstStep, lane0, lane1 int, perm *[64]byte)
TEXT ·packed24AVX2(SB), NOSPLIT, $0-56
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ groups+16(FP), CX
	MOVQ dstStep+24(FP), DX
	MOVQ lane0+32(FP), R8
	MOVQ lane1+40(FP), R9
	MOVQ perm+48(FP), AX
	TESTQ CX, CX
	JZ   p24x2done
	VMOVDQU (AX), Y8

p24x2loop:
	VMOVDQU (SI)(R8*1), X0
	VINSERTI128 $1, (SI)(R9*1), Y0, Y0
	VPSHUFB Y8, Y0, Y0
	VMOVDQU Y0, (DI)
	ADDQ $24, SI
	ADDQ DX, DI
	DECQ CX
	JNZ  p24x2loop
	VZEROUPPER

p24x2done:
	RET

// Dword indices 7 to 0, and the byte shuffle that reverses the words of
// each 128-bit lane.
DATA rev32x8<>+0x00(SB)/8, $0x0000000600000007
DATA rev32x8<>+0x08(SB)/8, $0x0000000400000005
DATA rev32x8<>+0x10(SB)/8, $0x0000000200000003
DATA rev32x8<>+0x18(SB)/8, $0x0000000000000001
GLOBL rev32x8<>(SB), RODATA|NOPTR, $32

DATA rev16x8<>+0x00(SB)/8, $0x09080b0a0d0c0f0e
DATA rev16x8<>+0x08(SB)/8, $0x0100030205040706
DATA rev16x8<>+0x10(SB)/8, $0x09080b0a0d0c0f0e
DATA rev16x8<>+0x18(SB)/8, $0x0100030205040706
GLOBL rev16x8<>(SB), RODATA|NOPTR, $32

// func reverseAVX2(dst, src *byte, vectors int, words bool)
//
// Writes the vectors*32 bytes at src to dst with their 32-bit (or, with
// words, 16-bit) elements in reverse order.
TEXT ·reverseAVX2(SB), NOSPLIT, $0-25
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ vectors+16(FP), CX
	MOVBQZX words+24(FP), AX
	TESTQ CX, CX
	JZ   rev2done
	MOVQ CX, DX
	SHLQ $5, DX
	LEAQ -32(DI)(DX*1), DI // the last vector of dst
	TESTQ AX, AX
	JNZ  rev2words
	VMOVDQU rev32x8<>(SB), Y1

rev2dwords:
	VPERMD (SI), Y1, Y0
	VMOVDQU Y0, (DI)
	ADDQ $32, SI
	SUBQ $32, DI
	DECQ CX
	JNZ  rev2dwords
	VZEROUPPER
	RET

rev2words:
	VMOVDQU rev16x8<>(SB), Y1

rev2wordsloop:
	VMOVDQU (SI), Y0
	VPSHUFB Y1, Y0, Y0
	VPERMQ $0x4E, Y0, Y0
	VMOVDQU Y0, (DI)
	ADDQ $32, SI
	SUBQ $32, DI
	DECQ CX
	JNZ  rev2wordsloop
	VZEROUPPER

rev2done:
	RET

// func reverseVBMI(dst, src *byte, vectors int, perm *[64]byte)
//
// Writes the vectors*64 bytes at src to dst with each vector's bytes
// permuted by perm (its pixels in reverse order), the first vector of src
// to the last of dst.
TEXT ·reverseVBMI(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ vectors+16(FP), CX
	MOVQ perm+24(FP), AX
	TESTQ CX, CX
	JZ   revbdone
	VMOVDQU64 (AX), Z1
	MOVQ CX, DX
	SHLQ $6, DX
	LEAQ -64(DI)(DX*1), DI // the last vector of dst

revbloop:
	VPERMB (SI), Z1, Z0
	VMOVDQU64 Z0, (DI)
	ADDQ $64, SI
	SUBQ $64, DI
	DECQ CX
	JNZ  revbloop
	VZEROUPPER

revbdone:
	RET
