// Package bufpool keeps large byte buffers in size-classed pools, so that
// a steady stream of large messages neither churns the garbage collector
// nor zeroes fresh memory for every message. Small buffers are left to
// the allocator, which is cheaper for them than a pool.
package bufpool

import (
	"math/bits"
	"sync"
)

const (
	// Min is the smallest pooled buffer.
	Min = 64 << 10
	// maxShift bounds the largest pooled class: 256 MiB.
	maxShift = 28
)

// pools[i] holds buffers whose capacity is exactly classSize(i).
var pools [2 * (maxShift + 1)]sync.Pool

// class returns the pool index for a buffer of n bytes (n >= Min), and
// the capacity of that class; classes are 2^k and 1.5·2^k.
func class(n int) (int, int) {
	k := bits.Len(uint(n - 1)) // 2^k >= n
	if half := 3 << (k - 2); k >= 2 && half >= n {
		return 2*(k-1) + 1, half
	}
	return 2 * k, 1 << k
}

// Get returns a buffer of length n and, if it is pooled, the handle that
// Put takes to return it (nil for a buffer left to the allocator). The
// contents are whatever the last user left.
func Get(n int) ([]byte, *[]byte) {
	if n < Min || n > 1<<maxShift {
		return make([]byte, n), nil
	}
	i, size := class(n)
	if p, ok := pools[i].Get().(*[]byte); ok {
		return (*p)[:n], p
	}
	b := make([]byte, size)
	return b[:n], &b
}

// Put returns a buffer that Get handed out with handle p. Nobody may use
// the buffer afterwards. A nil p is ignored.
func Put(p *[]byte) {
	if p == nil {
		return
	}
	i, size := class(cap(*p))
	if size != cap(*p) {
		return // not one of ours: leave it to the collector
	}
	pools[i].Put(p)
}
