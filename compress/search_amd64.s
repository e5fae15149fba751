#include "textflag.h"

// func searchAsm(src *byte, table *[8192]uint32, base uint32, fwd, fwdH, mflimit, probes int) (ip, ref int)
//
// The probe loop of fastLZ4.sequences (see searchGo, its twin in Go):
// from fwd, whose hash is fwdH, it probes with a stride of one byte more
// every 64 failed probes, counting from probes, updating the table as it
// goes, until the 4 bytes at a probe match those at its table entry (a
// position within 65535 bytes; an entry below base is position 0). It
// returns the probe and the match, or ip = -1 once a probe would pass
// mflimit.
TEXT ·searchAsm(SB), NOSPLIT, $0-72
	MOVQ src+0(FP), SI
	MOVQ table+8(FP), DI
	MOVL base+16(FP), R8     // zero-extended
	MOVQ fwd+24(FP), R9
	MOVQ fwdH+32(FP), R10
	MOVQ mflimit+40(FP), R11
	MOVQ probes+48(FP), R12
	MOVL $1, R13             // step
	XORL R15, R15            // zero, for the clamp
	MOVL (SI)(R9*1), R14     // the 4 bytes at fwd

loop:
	MOVQ R9, AX              // ip = fwd
	MOVL R14, BX             // the 4 bytes at ip
	ADDQ R13, R9             // fwd += step
	MOVQ R12, R13
	SHRQ $6, R13             // step = probes >> 6
	INCQ R12
	CMPQ R9, R11
	JGT  none
	MOVL (DI)(R10*4), CX     // the entry
	MOVL (SI)(R9*1), R14     // the 4 bytes at the next probe
	LEAL (R8)(AX*1), DX
	MOVL DX, (DI)(R10*4)     // the entry is now ip
	IMUL3L $-1640531535, R14, R10 // 2654435761
	SHRL $19, R10            // the next probe's hash
	SUBQ R8, CX              // ref = entry - base, or 0 below base
	CMOVQLT R15, CX
	CMPL (SI)(CX*1), BX
	JNE  loop
	MOVQ AX, DX
	SUBQ CX, DX
	CMPQ DX, $65535
	JGT  loop
	MOVQ AX, ip+56(FP)
	MOVQ CX, ref+64(FP)
	RET

none:
	MOVQ $-1, ip+56(FP)
	MOVQ $0, ref+64(FP)
	RET
