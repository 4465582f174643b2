package crc32c

import (
	"hash/crc32"
	"math/rand/v2"
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
