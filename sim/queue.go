package sim

// Event kinds. The order of the constants is part of the trace encoding:
// append only.
const (
	evTick        uint8 = iota + 1 // a rank's timer fires
	evDeliver                      // a message reaches its destination
	evCrash                        // a rank stops for good
	evPause                        // a rank is stopped (SIGSTOP)
	evResume                       // a paused rank continues (SIGCONT)
	evHeal                         // a partition ends
	evSplit                        // a partition begins
	evColl                         // a collective starts at its root
	evCollDeliver                  // a collective message reaches its destination
	evCollTick                     // a rank's deadline in a collective
)

// event is one entry of the scheduler's queue. at is simulated time in
// nanoseconds; seq breaks ties in the order events were scheduled, so the
// queue's order never depends on the heap's layout.
type event struct {
	at   int64
	seq  uint64
	kind uint8
	rank uint32 // the rank the event happens at
	arg  int32  // the message slot, partition or collective
}

// before reports whether a runs before b.
func (a *event) before(b *event) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	return a.seq < b.seq
}

// queue is a binary min-heap of events ordered by (at, seq), written out
// by hand so that pushing and popping make no interface calls and do not
// allocate once the slice has grown.
type queue struct {
	h   []event
	seq uint64
}

// push schedules e (its seq is assigned here).
func (q *queue) push(e event) {
	q.seq++
	e.seq = q.seq
	q.h = append(q.h, e)
	h := q.h
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !h[i].before(&h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

// len returns the number of scheduled events.
func (q *queue) len() int { return len(q.h) }

// peek returns the earliest event; the queue must not be empty.
func (q *queue) peek() *event { return &q.h[0] }

// pop removes and returns the earliest event; the queue must not be empty.
func (q *queue) pop() event {
	h := q.h
	top := h[0]
	n := len(h) - 1
	h[0] = h[n]
	h = h[:n]
	q.h = h
	i := 0
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && h[r].before(&h[l]) {
			m = r
		}
		if !h[m].before(&h[i]) {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	return top
}
