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

// queue orders events by (at, seq). It keeps two heaps: messages in
// flight, which live for a network delay and are few (a few dozen at
// 10,000 ranks), and timers and faults, one or two per rank. Popping takes
// the earlier of the two heads, so the order is exactly that of one heap,
// but a message's push and pop sift through a heap that stays in the
// nearest cache instead of one of twenty thousand entries.
type queue struct {
	msgs, timers heap
	seq          uint64
}

// push schedules e (its seq is assigned here).
func (q *queue) push(e event) {
	q.seq++
	e.seq = q.seq
	if e.kind == evDeliver || e.kind == evCollDeliver {
		q.msgs.push(e)
	} else {
		q.timers.push(e)
	}
}

// len returns the number of scheduled events.
func (q *queue) len() int { return len(q.msgs.h) + len(q.timers.h) }

// first returns the heap whose head runs first; the queue must not be
// empty.
func (q *queue) first() *heap {
	switch {
	case len(q.msgs.h) == 0:
		return &q.timers
	case len(q.timers.h) == 0:
		return &q.msgs
	case q.msgs.h[0].before(&q.timers.h[0]):
		return &q.msgs
	}
	return &q.timers
}

// peek returns the earliest event; the queue must not be empty.
func (q *queue) peek() *event { return &q.first().h[0] }

// pop removes and returns the earliest event; the queue must not be empty.
func (q *queue) pop() event { return q.first().pop() }

// heap is a binary min-heap of events ordered by (at, seq), written out by
// hand so that pushing and popping make no interface calls and do not
// allocate once the slice has grown.
type heap struct {
	h []event
}

func (q *heap) push(e event) {
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

func (q *heap) pop() event {
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
