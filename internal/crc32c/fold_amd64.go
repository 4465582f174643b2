//go:build gc && !purego

package crc32c

import "golang.org/x/sys/cpu"

// useFold: the fold needs AVX-512 F and VL and the VPCLMULQDQ extension
// (x/sys/cpu checks that the OS saves the ZMM state), and, for its
// VEX-encoded moves and the final CRC32Q, AVX and SSE 4.2.
var useFold = cpu.X86.HasAVX512F && cpu.X86.HasAVX512VL && cpu.X86.HasAVX512VPCLMULQDQ &&
	cpu.X86.HasAVX && cpu.X86.HasSSE42

// foldAVX512 folds p (n bytes, a non-zero multiple of 256) with the
// initial register seed added into its first four bytes, and returns the
// register after the 128-bit remainder (the CRC of p from seed, without
// inversions).
//
//go:noescape
func foldAVX512(seed uint32, p *byte, n int, k *[16]uint64) uint32

func fold(seed uint32, p []byte) uint32 {
	return foldAVX512(seed, &p[0], len(p), &consts)
}

// foldCopyAVX512 is foldAVX512 over src that also stores the n bytes it
// reads to dst.
//
//go:noescape
func foldCopyAVX512(seed uint32, dst, src *byte, n int, k *[16]uint64) uint32

func foldCopy(seed uint32, dst, src []byte) uint32 {
	return foldCopyAVX512(seed, &dst[0], &src[0], len(src), &consts)
}

// foldCopyStreamAVX512 is foldCopyAVX512 with non-temporal stores; dst
// is 64-byte aligned.
//
//go:noescape
func foldCopyStreamAVX512(seed uint32, dst, src *byte, n int, k *[16]uint64) uint32

func foldCopyStream(seed uint32, dst, src []byte) uint32 {
	return foldCopyStreamAVX512(seed, &dst[0], &src[0], len(src), &consts)
}
