package streamcopy

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestCopy checks Copy against copy for lengths around Min and the
// 256-byte blocks, at every destination alignment within a line, on
// each store path this machine has.
func TestCopy(t *testing.T) {
	paths := []bool{useAVX512}
	if useAVX512 {
		paths = append(paths, false)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	src := make([]byte, 3<<16)
	for i := range src {
		src[i] = byte(rng.Uint32())
	}
	for _, avx := range paths {
		t.Run(fmt.Sprintf("avx512=%v", avx), func(t *testing.T) {
			defer func(v bool) { useAVX512 = v }(useAVX512)
			useAVX512 = avx
			dst := make([]byte, len(src)+128)
			for _, n := range []int{0, 1, Min - 1, Min, Min + 1, Min + 255, Min + 256, Min + 319, 64 << 10, 1<<16 + 77, 2 << 16} {
				for off := range 64 {
					for i := range dst {
						dst[i] = 0xAA
					}
					s := src[off*3 : off*3+n]
					if got := Copy(dst[off:off+n], s); got != n {
						t.Fatalf("n=%d off=%d: Copy returned %d", n, off, got)
					}
					if !bytes.Equal(dst[off:off+n], s) {
						t.Fatalf("n=%d off=%d: bytes differ", n, off)
					}
					for i, b := range dst {
						if (i < off || i >= off+n) && b != 0xAA {
							t.Fatalf("n=%d off=%d: byte %d outside the destination written", n, off, i)
						}
					}
				}
			}
		})
	}
}

// TestCopyShort checks that Copy copies the shorter of its arguments.
func TestCopyShort(t *testing.T) {
	src := bytes.Repeat([]byte{7}, 3*Min)
	dst := make([]byte, 2*Min)
	if n := Copy(dst, src); n != len(dst) || !bytes.Equal(dst, src[:len(dst)]) {
		t.Fatalf("Copy into a shorter dst: %d", n)
	}
	dst = make([]byte, 4*Min)
	if n := Copy(dst, src); n != len(src) || !bytes.Equal(dst[:n], src) || dst[n] != 0 {
		t.Fatalf("Copy from a shorter src: %d", n)
	}
}

// BenchmarkCopy compares Copy with copy within one goroutine (where the
// destination stays in cache, streaming is no gain; see the package doc
// for where it is).
func BenchmarkCopy(b *testing.B) {
	src := make([]byte, 1<<20)
	dst := make([]byte, 1<<20)
	for _, impl := range []struct {
		name string
		f    func(dst, src []byte) int
	}{{"copy", func(d, s []byte) int { return copy(d, s) }}, {"stream", Copy}} {
		b.Run(impl.name, func(b *testing.B) {
			b.SetBytes(int64(len(src)))
			b.ReportAllocs()
			for b.Loop() {
				impl.f(dst, src)
			}
		})
	}
}
