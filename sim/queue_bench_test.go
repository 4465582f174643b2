package sim

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkQueue is the scheduler's steady state at 10,000 ranks: a timer
// per rank about a second apart, each firing sends a message (100 µs -
// 2 ms), and each message delivered sends an answer half the time.
func BenchmarkQueue(b *testing.B) {
	rnd := rand.New(rand.NewPCG(1, 1))
	var q queue
	for r := range 10000 {
		q.setTick(uint32(r), rnd.Int64N(1e9))
	}
	b.ResetTimer()
	for range b.N {
		e := q.pop()
		switch e.kind {
		case evTick:
			q.setTick(e.rank, e.at+5e8+rnd.Int64N(1e9))
			q.push(event{at: e.at + 1e5 + rnd.Int64N(19e5), kind: evDeliver})
		case evDeliver:
			if rnd.IntN(2) == 0 {
				q.push(event{at: e.at + 1e5 + rnd.Int64N(19e5), kind: evDeliver})
			}
		}
	}
}
