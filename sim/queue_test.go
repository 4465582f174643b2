package sim

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestQueueOrder checks the heap against a sort: events come out by time,
// and events at one time in the order they were pushed.
func TestQueueOrder(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	var q queue
	var want []event
	for i := range 5000 {
		e := event{at: rnd.Int64N(50), rank: uint32(i), kind: uint8(1 + i%3)} // ticks, deliveries, crashes: both heaps
		q.push(e)
		e.seq = q.seq
		want = append(want, e)
		// Interleave pops with pushes, as the scheduler does.
		if i%7 == 0 {
			slices.SortStableFunc(want, func(a, b event) int { return int(a.at - b.at) })
			got := q.pop()
			if got != want[0] {
				t.Fatalf("pop %d: got %+v, want %+v", i, got, want[0])
			}
			want = want[1:]
		}
	}
	slices.SortStableFunc(want, func(a, b event) int { return int(a.at - b.at) })
	for i, w := range want {
		if q.peek().at != w.at {
			t.Fatalf("peek %d: at %d, want %d", i, q.peek().at, w.at)
		}
		if got := q.pop(); got != w {
			t.Fatalf("pop %d: got %+v, want %+v", i, got, w)
		}
	}
	if q.len() != 0 {
		t.Fatalf("%d events left", q.len())
	}
}

// TestQueueTicksMove checks ticks that are moved in place against a
// reference that drops the old tick and pushes a new one.
func TestQueueTicksMove(t *testing.T) {
	rnd := rand.New(rand.NewPCG(3, 4))
	var q queue
	type key struct{ at, seq int64 }
	ref := map[uint32]key{} // rank -> its one tick
	var msgs []event
	for i := range 20000 {
		switch rnd.IntN(4) {
		case 0, 1:
			r := uint32(rnd.IntN(50))
			at := rnd.Int64N(100)
			q.setTick(r, at)
			ref[r] = key{at, int64(q.seq)}
		case 2:
			e := event{at: rnd.Int64N(100), kind: evDeliver, rank: uint32(i)}
			q.push(e)
			e.seq = q.seq
			msgs = append(msgs, e)
		case 3:
			if q.len() != len(ref)+len(msgs) {
				t.Fatalf("len %d, want %d", q.len(), len(ref)+len(msgs))
			}
			if q.len() == 0 {
				continue
			}
			// The reference's earliest: the least (at, seq) of both.
			best, bestRank, bestMsg := key{1 << 62, 0}, uint32(0), -1
			for r, k := range ref {
				if k.at < best.at || k.at == best.at && k.seq < best.seq {
					best, bestRank = k, r
				}
			}
			for j, m := range msgs {
				if m.at < best.at || m.at == best.at && int64(m.seq) < best.seq {
					best, bestMsg = key{m.at, int64(m.seq)}, j
				}
			}
			got := q.pop()
			if got.at != best.at || int64(got.seq) != best.seq {
				t.Fatalf("step %d: popped (%d, %d), want (%d, %d)", i, got.at, got.seq, best.at, best.seq)
			}
			if bestMsg >= 0 {
				msgs = append(msgs[:bestMsg], msgs[bestMsg+1:]...)
			} else {
				if got.kind != evTick || got.rank != bestRank {
					t.Fatalf("step %d: popped %+v, want rank %d's tick", i, got, bestRank)
				}
				delete(ref, bestRank)
			}
		}
	}
}
