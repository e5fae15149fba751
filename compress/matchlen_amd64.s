#include "textflag.h"

// func equalPrefixAVX2(a, b *byte, blocks int) int
//
// Returns how many leading bytes of a and b are equal, looking at no more
// than blocks*32 bytes: 64 bytes a step while whole steps remain, then 32.
TEXT ·equalPrefixAVX2(SB), NOSPLIT, $0-32
	MOVQ a+0(FP), SI
	MOVQ b+8(FP), DI
	MOVQ blocks+16(FP), CX
	XORQ AX, AX          // bytes compared and equal
	SHLQ $5, CX          // bytes to look at

loop64:
	LEAQ 64(AX), DX
	CMPQ DX, CX
	JA   loop32
	VMOVDQU (SI)(AX*1), Y0
	VMOVDQU 32(SI)(AX*1), Y1
	VPCMPEQB (DI)(AX*1), Y0, Y0
	VPCMPEQB 32(DI)(AX*1), Y1, Y1
	VPAND Y0, Y1, Y2
	VPMOVMSKB Y2, DX
	CMPL DX, $0xffffffff
	JNE  diff64
	ADDQ $64, AX
	JMP  loop64

diff64:
	// The first 32 bytes, or the next 32, differ.
	VPMOVMSKB Y0, DX
	NOTL DX
	TESTL DX, DX
	JNZ  found
	ADDQ $32, AX
	VPMOVMSKB Y1, DX
	NOTL DX
	JMP  found

loop32:
	LEAQ 32(AX), DX
	CMPQ DX, CX
	JA   done
	VMOVDQU (SI)(AX*1), Y0
	VPCMPEQB (DI)(AX*1), Y0, Y0
	VPMOVMSKB Y0, DX
	NOTL DX
	TESTL DX, DX
	JNZ  found
	ADDQ $32, AX
	JMP  loop32

found:
	TZCNTL DX, DX
	ADDQ DX, AX

done:
	VZEROUPPER
	MOVQ AX, ret+24(FP)
	RET
