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
