package swim

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkReceiveCold measures Receive where thousands of machines share
// the process, so their tables are not in cache: 1,000 machines of 10,000
// members, each message carrying the mandatory entries and 8 piggybacked
// updates about random members (no change: the common case).
func BenchmarkReceiveCold(b *testing.B) {
	const machines, n = 1000, 10000
	ms := make([]*Machine, machines)
	for i := range ms {
		m := New(ID(i), Config{}, rand.New(rand.NewPCG(1, uint64(i))))
		m.Grow(n)
		for j := range n {
			m.Add(ID(j), 0)
		}
		m.Tick(0)
		ms[i] = m
	}
	rng := rand.New(rand.NewPCG(2, 2))
	msgs := make([]Message, 256)
	for k := range msgs {
		ups := make([]Update, 10)
		for j := range ups {
			ups[j] = upd(ID(rng.IntN(n)), Alive, 0, 0)
		}
		msgs[k] = Message{Kind: KindAck, Seq: 1, Target: ups[0].ID, Updates: ups}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		m := ms[rng.IntN(machines)]
		msg := &msgs[i%len(msgs)]
		m.Receive(0, msg.Updates[0].ID, msg)
		m.Outbox()
	}
}
