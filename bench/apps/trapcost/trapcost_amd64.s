#include "textflag.h"

// func probeMe()
// One instruction of each kind a uprobe can sit on: the kernel emulates
// a probed NOP or PUSH and single-steps the others (MOV, CMP, POP, RET).
TEXT ·probeMe(SB), NOSPLIT|NOFRAME, $0-0
	BYTE $0x90          // NOP
	PUSHQ BP
	MOVQ SP, BP
	CMPQ SP, 16(R14)    // a Go function's usual first instruction
	POPQ BP
	RET
