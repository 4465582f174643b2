//go:build gc && !purego

package streamcopy

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

// useStream: every amd64 CPU has SSE2's MOVNTDQ; AVX-512 F stores a
// whole line at a time.
const useStream = true

var useAVX512 = cpu.X86.HasAVX512F

// align returns how many bytes of dst come before its first 64-byte
// boundary.
func align(dst []byte) int {
	return int(-uintptr(unsafe.Pointer(unsafe.SliceData(dst))) & 63)
}

// streamAVX512 and streamSSE2 copy n bytes (a non-zero multiple of 256)
// from src to dst (64-byte aligned) with non-temporal stores, then fence.
//
//go:noescape
func streamAVX512(dst, src *byte, n int)

//go:noescape
func streamSSE2(dst, src *byte, n int)

func stream(dst, src []byte) {
	if len(dst) == 0 {
		return
	}
	if useAVX512 {
		streamAVX512(&dst[0], &src[0], len(dst))
	} else {
		streamSSE2(&dst[0], &src[0], len(dst))
	}
}
