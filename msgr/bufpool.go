package msgr

import (
	"math/bits"
	"sync"

	"github.com/ferrymsg/ferry/msg"
)

// Large received message bodies come from size-classed pools and go back
// when the message is released (msg.Message.Done, which the messenger
// itself calls once it has sent a message), so a steady stream of large
// messages neither churns the garbage collector nor zeroes fresh memory
// for every message. Small bodies are left to the allocator, which is
// cheaper for them than a pool.
const (
	poolMin      = 64 << 10 // smallest pooled body
	poolMaxShift = 28       // largest pooled class: 256 MiB
)

// bodyPools[i] holds buffers whose capacity is exactly classSize(i).
var bodyPools [2 * (poolMaxShift + 1)]sync.Pool

// bodyClass returns the pool index for a body of n bytes (n >= poolMin),
// and the capacity of that class; classes are 2^k and 1.5·2^k.
func bodyClass(n int) (int, int) {
	k := bits.Len(uint(n - 1)) // 2^k >= n
	if half := 3 << (k - 2); k >= 2 && half >= n {
		return 2*(k-1) + 1, half
	}
	return 2 * k, 1 << k
}

// getBody returns a buffer of length n and, for a pooled one, the
// function that returns it.
func getBody(n int) ([]byte, func(*msg.Message)) {
	if n < poolMin || n > 1<<poolMaxShift {
		return make([]byte, n), nil
	}
	i, size := bodyClass(n)
	if p, ok := bodyPools[i].Get().(*[]byte); ok {
		return (*p)[:n], releaseBody(p, i)
	}
	b := make([]byte, size)
	return b[:n], releaseBody(&b, i)
}

func releaseBody(p *[]byte, i int) func(*msg.Message) {
	return func(m *msg.Message) {
		m.Front, m.Middle, m.Data = nil, nil, nil
		bodyPools[i].Put(p)
	}
}
