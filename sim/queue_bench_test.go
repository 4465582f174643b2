package sim

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkQueue is the scheduler's steady state at 10,000 ranks: about
// 20,000 events pending, each pop followed by a push up to a second on.
func BenchmarkQueue(b *testing.B) {
	rnd := rand.New(rand.NewPCG(1, 1))
	var q queue
	for range 20000 {
		q.push(event{at: rnd.Int64N(1e9)})
	}
	b.ResetTimer()
	for range b.N {
		e := q.pop()
		q.push(event{at: e.at + rnd.Int64N(1e9)})
	}
}
