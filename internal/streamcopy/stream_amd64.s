//go:build gc && !purego

#include "textflag.h"

// func streamAVX512(dst, src *byte, n int)
TEXT ·streamAVX512(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
avxloop:
	VMOVDQU64 0(SI), Z0
	VMOVDQU64 64(SI), Z1
	VMOVDQU64 128(SI), Z2
	VMOVDQU64 192(SI), Z3
	VMOVNTDQ  Z0, 0(DI)
	VMOVNTDQ  Z1, 64(DI)
	VMOVNTDQ  Z2, 128(DI)
	VMOVNTDQ  Z3, 192(DI)
	ADDQ      $256, SI
	ADDQ      $256, DI
	SUBQ      $256, CX
	JNZ       avxloop
	SFENCE
	VZEROUPPER
	RET

// func streamSSE2(dst, src *byte, n int)
TEXT ·streamSSE2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
sseloop:
	MOVOU   0(SI), X0
	MOVOU   16(SI), X1
	MOVOU   32(SI), X2
	MOVOU   48(SI), X3
	MOVNTO  X0, 0(DI)
	MOVNTO  X1, 16(DI)
	MOVNTO  X2, 32(DI)
	MOVNTO  X3, 48(DI)
	ADDQ    $64, SI
	ADDQ    $64, DI
	SUBQ    $64, CX
	JNZ     sseloop
	SFENCE
	RET
