//go:build gc && !purego

#include "textflag.h"

// FOLD256 multiplies the 256 bytes of remainder in Z0..Z3 by x^2048
// (Z8) and adds the next 256 bytes of the message (Z10..Z13).
#define FOLD256 \
	VPCLMULQDQ $0x00, Z8, Z0, Z4; \
	VPCLMULQDQ $0x11, Z8, Z0, Z0; \
	VPCLMULQDQ $0x00, Z8, Z1, Z5; \
	VPCLMULQDQ $0x11, Z8, Z1, Z1; \
	VPCLMULQDQ $0x00, Z8, Z2, Z6; \
	VPCLMULQDQ $0x11, Z8, Z2, Z2; \
	VPCLMULQDQ $0x00, Z8, Z3, Z7; \
	VPCLMULQDQ $0x11, Z8, Z3, Z3; \
	VPTERNLOGQ $0x96, Z10, Z4, Z0; \
	VPTERNLOGQ $0x96, Z11, Z5, Z1; \
	VPTERNLOGQ $0x96, Z12, Z6, Z2; \
	VPTERNLOGQ $0x96, Z13, Z7, Z3;

// REDUCE folds Z0, Z1 and Z2 onto Z3, Z3's lanes onto one, and leaves
// that lane's CRC from a zero register in CX.
#define REDUCE \
	VBROADCASTI32X4 16(DX), Z8; \
	VPCLMULQDQ $0x00, Z8, Z0, Z4; \
	VPCLMULQDQ $0x11, Z8, Z0, Z5; \
	VPTERNLOGQ $0x96, Z5, Z4, Z3; \
	VBROADCASTI32X4 32(DX), Z8; \
	VPCLMULQDQ $0x00, Z8, Z1, Z4; \
	VPCLMULQDQ $0x11, Z8, Z1, Z5; \
	VPTERNLOGQ $0x96, Z5, Z4, Z3; \
	VBROADCASTI32X4 48(DX), Z8; \
	VPCLMULQDQ $0x00, Z8, Z2, Z4; \
	VPCLMULQDQ $0x11, Z8, Z2, Z5; \
	VPTERNLOGQ $0x96, Z5, Z4, Z3; \
	VMOVDQU64  64(DX), Z8; \
	VPCLMULQDQ $0x00, Z8, Z3, Z4; \
	VPCLMULQDQ $0x11, Z8, Z3, Z5; \
	VPXORQ     Z5, Z4, Z4; \
	VEXTRACTI64X4 $1, Z4, Y5; \
	VPXORQ     Y5, Y4, Y4; \
	VEXTRACTI32X4 $1, Y4, X5; \
	VPXORQ     X5, X4, X4; \
	VEXTRACTI32X4 $3, Z3, X5; \
	VPXORQ     X5, X4, X4; \
	VMOVQ      X4, AX; \
	VPEXTRQ    $1, X4, BX; \
	VZEROUPPER; \
	XORL       CX, CX; \
	CRC32Q     AX, CX; \
	CRC32Q     BX, CX;

// FOLDCOPY is foldAVX512's loop over src (SI) that also stores each
// 64-byte block it loads to dst (DI) with the instruction STORE; LOOP and
// DONE name its loop and the label after it, where the remainder is left
// in Z0..Z3 for REDUCE.
#define FOLDCOPY(STORE, LOOP, DONE) \
	MOVL seed+0(FP), AX; \
	MOVQ dst+8(FP), DI; \
	MOVQ src+16(FP), SI; \
	MOVQ n+24(FP), CX; \
	MOVQ k+32(FP), DX; \
	VMOVDQU64 0(SI), Z0; \
	VMOVDQU64 64(SI), Z1; \
	VMOVDQU64 128(SI), Z2; \
	VMOVDQU64 192(SI), Z3; \
	STORE Z0, 0(DI); \
	STORE Z1, 64(DI); \
	STORE Z2, 128(DI); \
	STORE Z3, 192(DI); \
	VMOVQ AX, X9; \
	VPXORQ Z9, Z0, Z0; \
	VBROADCASTI32X4 0(DX), Z8; \
	ADDQ $256, SI; \
	ADDQ $256, DI; \
	SUBQ $256, CX; \
	JZ DONE; \
LOOP: \
	VMOVDQU64 0(SI), Z10; \
	VMOVDQU64 64(SI), Z11; \
	VMOVDQU64 128(SI), Z12; \
	VMOVDQU64 192(SI), Z13; \
	STORE Z10, 0(DI); \
	STORE Z11, 64(DI); \
	STORE Z12, 128(DI); \
	STORE Z13, 192(DI); \
	FOLD256 \
	ADDQ $256, SI; \
	ADDQ $256, DI; \
	SUBQ $256, CX; \
	JNZ LOOP

// func foldAVX512(seed uint32, p *byte, n int, k *[16]uint64) uint32
//
// Z0..Z3 hold 256 bytes of running remainder (16 lanes of 128 bits); each
// round multiplies every lane by x^2048 (the constants at 0(DX)) and adds
// the next 256 bytes. Then Z0, Z1 and Z2 are folded onto Z3 (by 192, 128
// and 64 bytes) and Z3's four lanes onto one (by 48, 32 and 16 bytes),
// whose CRC from a zero register (two CRC32Q) is the result.
TEXT ·foldAVX512(SB), NOSPLIT, $0-36
	MOVL seed+0(FP), AX
	MOVQ p+8(FP), SI
	MOVQ n+16(FP), CX
	MOVQ k+24(FP), DX

	VMOVDQU64 0(SI), Z0
	VMOVDQU64 64(SI), Z1
	VMOVDQU64 128(SI), Z2
	VMOVDQU64 192(SI), Z3
	VMOVQ     AX, X9
	VPXORQ    Z9, Z0, Z0
	VBROADCASTI32X4 0(DX), Z8
	ADDQ      $256, SI
	SUBQ      $256, CX
	JZ        reduce

loop:
	VMOVDQU64  0(SI), Z10
	VMOVDQU64  64(SI), Z11
	VMOVDQU64  128(SI), Z12
	VMOVDQU64  192(SI), Z13
	FOLD256
	ADDQ       $256, SI
	SUBQ       $256, CX
	JNZ        loop

reduce:
	REDUCE
	MOVL       CX, ret+32(FP)
	RET

// func foldCopyAVX512(seed uint32, dst, src *byte, n int, k *[16]uint64) uint32
//
// foldAVX512 over src that also stores each 64-byte block it loads to
// dst: the copy and the CRC share one pass over the source.
TEXT ·foldCopyAVX512(SB), NOSPLIT, $0-44
	FOLDCOPY(VMOVDQU64, cloop, creduce)

creduce:
	REDUCE
	MOVL CX, ret+40(FP)
	RET

// func foldCopyStreamAVX512(seed uint32, dst, src *byte, n int, k *[16]uint64) uint32
//
// foldCopyAVX512 with non-temporal stores (dst 64-byte aligned), fenced
// before the result is computed (see CopyUpdateStream).
TEXT ·foldCopyStreamAVX512(SB), NOSPLIT, $0-44
	FOLDCOPY(VMOVNTDQ, sloop, sreduce)

sreduce:
	SFENCE
	REDUCE
	MOVL CX, ret+40(FP)
	RET
