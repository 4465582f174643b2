package msgr

import (
	"testing"

	"github.com/ferrymsg/ferry/msg"
)

// TestFusedCRCShapes checks which data shapes are written with their
// CRC folded into the copy: at least crcAheadMin bytes, and every
// buffer from the first large one on large.
func TestFusedCRCShapes(t *testing.T) {
	b := func(sizes ...int) msg.Buffers {
		var d msg.Buffers
		for _, n := range sizes {
			d = append(d, make([]byte, n))
		}
		return d
	}
	for _, tc := range []struct {
		data msg.Buffers
		k    int
		ok   bool
	}{
		{b(), 0, false},
		{b(1 << 20), 0, true},
		{b(crcAheadMin - 1), 0, false},
		{b(8, 1<<20), 1, true},
		{b(8, 100, 1<<20, copyMax), 2, true},
		{b(1<<20, 8), 0, false},
		{b(copyMax, 8, 1<<20), 0, false},
		{b(copyMax-1, copyMax-1, copyMax-1, copyMax-1, copyMax-1), 0, false},
		{b(copyMax, copyMax, copyMax, copyMax), 0, true},
	} {
		k, ok := fusedCRC(tc.data)
		if ok != tc.ok || ok && k != tc.k {
			t.Errorf("%d buffers of %v bytes: %d, %v; want %d, %v", len(tc.data), lens(tc.data), k, ok, tc.k, tc.ok)
		}
	}
}

func lens(d msg.Buffers) []int {
	var n []int
	for _, p := range d {
		n = append(n, len(p))
	}
	return n
}
