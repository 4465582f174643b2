// Package crc32c computes the Castagnoli CRC-32 (crc32c), the checksum of
// every msgr2 frame segment, faster than hash/crc32 on CPUs that can fold
// with 512-bit carry-less multiplies.
//
// Update has exactly the semantics of crc32.Update with the Castagnoli
// table. Buffers of at least foldMin bytes are folded 256 bytes at a time
// with VPCLMULQDQ on 512-bit registers (amd64 with AVX-512 VPCLMULQDQ);
// what is left, and every buffer on other machines, goes to hash/crc32
// (SSE 4.2 or the slicing tables).
//
// The folding follows the method of Gopal et al., "Fast CRC Computation
// for Generic Polynomials Using PCLMULQDQ Instruction" (Intel, 2009): the
// message is reduced modulo the CRC polynomial P by multiplying 128-bit
// lanes with x^D mod P and adding them to the lanes D bits further on;
// the 128-bit remainder left at the end has the same CRC as what it
// replaced and is finished with the ordinary CRC. The fold constants are
// computed at start-up from P (see consts), not copied from a table.
package crc32c

import (
	"hash/crc32"
	"unsafe"
)

var table = crc32.MakeTable(crc32.Castagnoli)

// foldMin is the length from which Update folds; below it the SSE 4.2
// instruction path of hash/crc32 is as fast.
const foldMin = 512

// Update returns the result of adding the bytes in p to crc, as
// crc32.Update(crc, crc32.MakeTable(crc32.Castagnoli), p) does.
func Update(crc uint32, p []byte) uint32 {
	if !useFold || len(p) < foldMin {
		return crc32.Update(crc, table, p)
	}
	n := len(p) &^ 255
	return crc32.Update(^fold(^crc, p[:n]), table, p[n:])
}

// CopyUpdate copies src into dst, as copy does, and returns the count
// copied and the result of adding the copied bytes to crc, as Update
// does. The CRC is folded from the registers the copy loads, so the two
// cost one pass over src rather than two. dst and src must not overlap.
func CopyUpdate(crc uint32, dst, src []byte) (int, uint32) {
	n := min(len(dst), len(src))
	if !useFold || n < foldMin {
		copy(dst, src[:n])
		return n, crc32.Update(crc, table, src[:n])
	}
	k := n &^ 255
	crc = ^foldCopy(^crc, dst[:k], src[:k])
	copy(dst[k:n], src[k:n])
	return n, crc32.Update(crc, table, src[k:n])
}

// streamMin is the length from which CopyUpdateStream streams.
const streamMin = 4096

// CopyUpdateStream is CopyUpdate with non-temporal stores for the
// 64-byte-aligned middle of dst: its lines are written to memory without
// first being read into this core's cache (see internal/streamcopy for
// when that pays). The stores are fenced before it returns. Buffers
// shorter than 4 KiB, and every buffer on machines without the fold, are
// copied as CopyUpdate copies them.
func CopyUpdateStream(crc uint32, dst, src []byte) (int, uint32) {
	n := min(len(dst), len(src))
	if !useFold || n < streamMin {
		return CopyUpdate(crc, dst, src)
	}
	a := int(-uintptr(unsafe.Pointer(unsafe.SliceData(dst))) & 63)
	_, crc = CopyUpdate(crc, dst[:a], src[:a])
	k := (n - a) &^ 255
	crc = ^foldCopyStream(^crc, dst[a:a+k], src[a:a+k])
	_, crc = CopyUpdate(crc, dst[a+k:n], src[a+k:n])
	return n, crc
}

// Checksum returns the crc32c of p.
func Checksum(p []byte) uint32 { return Update(0, p) }

// Normal-form Castagnoli polynomial without its x^32 term.
const poly = 0x1EDC6F41

// xpow returns x^n mod P in normal form (bit m is the coefficient of x^m).
func xpow(n int) uint32 {
	r := uint32(1)
	for range n {
		carry := r & 0x80000000
		r <<= 1
		if carry != 0 {
			r ^= poly
		}
	}
	return r
}

// lane returns q, a polynomial of degree below 32, as a 64-bit operand
// of a reflected carry-less multiply: the coefficient of x^m at bit 63-m.
func lane(q uint32) uint64 {
	var v uint64
	for m := range 32 {
		if q&(1<<m) != 0 {
			v |= 1 << (63 - m)
		}
	}
	return v
}

// foldPair returns the constants that move a 128-bit lane D bits further
// into the message. In the reflected bit order a lane's low quadword L
// holds its high-order half, so the lane is L·x^64 + H; a reflected
// carry-less multiply yields x·a·b, so L is multiplied by x^(D+63) and H
// by x^(D-1), both reduced mod P.
func foldPair(d int) [2]uint64 {
	return [2]uint64{lane(xpow(d + 63)), lane(xpow(d - 1))}
}

// consts is laid out for the assembly: fold by 256, 192, 128 and 64
// bytes (each a low and a high multiplier), then one 512-bit register of
// per-lane multipliers folding lanes 0, 1 and 2 of the last 64 bytes by
// 48, 32 and 16 bytes (lane 3 stays, so its multipliers are zero).
var consts = func() (k [16]uint64) {
	for i, bytes := range []int{256, 192, 128, 64, 48, 32, 16} {
		p := foldPair(8 * bytes)
		k[2*i], k[2*i+1] = p[0], p[1]
	}
	return k
}()
