package crc32c

import (
	"bytes"
	"hash/crc32"
	"math/rand/v2"
	"strconv"
	"testing"
)

// TestAgainstStdlib compares Update with hash/crc32 for every length up to
// 3 KiB and a spread of larger ones, each with a random register, on
// random data at every alignment of the first byte.
func TestAgainstStdlib(t *testing.T) {
	t.Logf("folding with AVX-512 VPCLMULQDQ: %v", useFold)
	rng := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 1<<20+64)
	for i := range buf {
		buf[i] = byte(rng.Uint32())
	}
	lens := []int{}
	for n := 0; n <= 3072; n++ {
		lens = append(lens, n)
	}
	lens = append(lens, 4095, 4096, 4097, 65535, 65536, 65537, 1<<20-1, 1<<20)
	for _, n := range lens {
		off := rng.IntN(64)
		p := buf[off : off+n]
		seed := rng.Uint32()
		if got, want := Update(seed, p), crc32.Update(seed, table, p); got != want {
			t.Fatalf("len %d off %d seed %#x: got %#08x want %#08x", n, off, seed, got, want)
		}
	}
}

// TestPatterns checks data whose folds multiply all-ones and single-bit
// lanes, where a wrong constant or lane order shows at once.
func TestPatterns(t *testing.T) {
	for _, n := range []int{512, 768, 1024, 4096} {
		for bit := 0; bit < 8*n; bit += 61 {
			p := make([]byte, n)
			p[bit/8] = 1 << (bit % 8)
			for _, seed := range []uint32{0, 0xFFFFFFFF} {
				if got, want := Update(seed, p), crc32.Update(seed, table, p); got != want {
					t.Fatalf("len %d bit %d seed %#x: got %#08x want %#08x", n, bit, seed, got, want)
				}
			}
		}
		p := make([]byte, n)
		for i := range p {
			p[i] = 0xFF
		}
		if got, want := Update(0, p), crc32.Update(0, table, p); got != want {
			t.Fatalf("len %d all ones: got %#08x want %#08x", n, got, want)
		}
	}
}

func TestChecksum(t *testing.T) {
	// The crc32c check value (RFC 3720, B.4): "123456789" → 0xE3069283.
	if got := Checksum([]byte("123456789")); got != 0xE3069283 {
		t.Fatalf("check value: got %#08x", got)
	}
	p := make([]byte, 32)
	if got := Checksum(p); got != 0x8A9136AA { // RFC 3720 B.4: 32 bytes of zeros
		t.Fatalf("32 zero bytes: got %#08x", got)
	}
}

func FuzzUpdate(f *testing.F) {
	f.Add(uint32(0), make([]byte, 600))
	f.Add(uint32(0xdeadbeef), make([]byte, 1024))
	f.Fuzz(func(t *testing.T, seed uint32, p []byte) {
		if got, want := Update(seed, p), crc32.Update(seed, table, p); got != want {
			t.Fatalf("len %d seed %#x: got %#08x want %#08x", len(p), seed, got, want)
		}
	})
}

func BenchmarkUpdate(b *testing.B) {
	for _, n := range []int{512, 4096, 65536, 1 << 20} {
		p := make([]byte, n)
		b.Run(size(n), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(n))
			for b.Loop() {
				Update(0, p)
			}
		})
		b.Run(size(n)+"/stdlib", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(n))
			for b.Loop() {
				crc32.Update(0, table, p)
			}
		})
	}
}

func size(n int) string {
	switch {
	case n >= 1<<20:
		return itoa(n>>20) + "MiB"
	case n >= 1<<10:
		return itoa(n>>10) + "KiB"
	}
	return itoa(n) + "B"
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}

// TestCopyUpdate checks that CopyUpdate copies exactly min(len(dst),
// len(src)) bytes, leaves the rest of dst alone and returns Update's CRC,
// for lengths around the fold's block sizes at every alignment.
func TestCopyUpdate(t *testing.T) { testCopyUpdate(t, CopyUpdate) }

// TestCopyUpdateStream is TestCopyUpdate for the streaming variant, plus
// every destination alignment within a cache line.
func TestCopyUpdateStream(t *testing.T) {
	testCopyUpdate(t, CopyUpdateStream)
	src := make([]byte, 9000)
	for i := range src {
		src[i] = byte(i*31 + i>>8)
	}
	dst := make([]byte, len(src)+64)
	for do := range 64 {
		clear(dst)
		n, crc := CopyUpdateStream(7, dst[do:do+len(src)], src)
		if n != len(src) || crc != crc32.Update(7, table, src) || !bytes.Equal(dst[do:do+n], src) {
			t.Fatalf("dst offset %d: n %d, crc %#08x", do, n, crc)
		}
	}
}

// testCopyUpdate checks f's copy and CRC against copy and crc32.Update
// over lengths around the fold's and the stream's blocks, at random
// alignments.
func testCopyUpdate(t *testing.T, f func(uint32, []byte, []byte) (int, uint32)) {
	rng := rand.New(rand.NewPCG(3, 4))
	src := make([]byte, 1<<20+64)
	for i := range src {
		src[i] = byte(rng.Uint32())
	}
	dst := make([]byte, len(src)+64)
	lens := []int{0, 1, 255, 256, 511, 512, 513, 767, 768, 1000, 4095, 4096, 4097, 4096 + 300, 65536 + 17, 1 << 20}
	for _, n := range lens {
		for _, extra := range []int{0, 5, 0, 0} {
			so, do := rng.IntN(64), rng.IntN(64)
			for i := range dst {
				dst[i] = 0xA5
			}
			seed := rng.Uint32()
			s := src[so : so+n]
			d := dst[do : do+n+extra]
			if extra > 0 {
				s = src[so : so+n]
				d = dst[do : do+n]
			}
			got, crc := f(seed, d, s)
			if got != n {
				t.Fatalf("len %d: copied %d", n, got)
			}
			if want := crc32.Update(seed, table, s); crc != want {
				t.Fatalf("len %d src %d dst %d: crc %#08x want %#08x", n, so, do, crc, want)
			}
			for i := range dst {
				inside := i >= do && i < do+n
				if inside && dst[i] != s[i-do] || !inside && dst[i] != 0xA5 {
					t.Fatalf("len %d src %d dst %d: byte %d is %#x", n, so, do, i, dst[i])
				}
			}
		}
	}
	// A shorter dst bounds the copy and the CRC.
	d := make([]byte, 700)
	n, crc := f(0, d, src[:1000])
	if n != 700 || crc != crc32.Update(0, table, src[:700]) {
		t.Fatalf("short dst: n %d crc %#08x", n, crc)
	}
}

// BenchmarkCopyUpdate compares a copy followed by Update with the fused
// CopyUpdate on 64 KiB and 1 MiB.
func BenchmarkCopyUpdate(b *testing.B) {
	for _, n := range []int{64 << 10, 1 << 20} {
		src := make([]byte, n)
		dst := make([]byte, n)
		for i := range src {
			src[i] = byte(i * 7)
		}
		b.Run("copy+update/"+strconv.Itoa(n>>10)+"KiB", func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				copy(dst, src)
				Update(0, dst)
			}
		})
		b.Run("fused/"+strconv.Itoa(n>>10)+"KiB", func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				CopyUpdate(0, dst, src)
			}
		})
		b.Run("copy/"+strconv.Itoa(n>>10)+"KiB", func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				copy(dst, src)
			}
		})
	}
}
