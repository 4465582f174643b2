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
//
// A rank's next tick is a third kind: each rank has at most one, kept in
// an indexed heap and moved in place when the rank's machine asks for
// another time (setTick), so a tick that was asked for and then put off
// leaves nothing stale behind (half the ticks of a run were).
type queue struct {
	msgs, timers heap
	ticks        tickHeap
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

// setTick schedules rank's tick at, replacing the one it had, as if the
// old one were dropped and a new one pushed.
func (q *queue) setTick(rank uint32, at int64) {
	q.seq++
	q.ticks.set(event{at: at, seq: q.seq, kind: evTick, rank: rank})
}

// len returns the number of scheduled events.
func (q *queue) len() int { return len(q.msgs.h) + len(q.timers.h) + len(q.ticks.h) }

// first returns the heap whose head runs first (0 messages, 1 timers, 2
// ticks) and that head; the queue must not be empty.
func (q *queue) first() (int, *event) {
	which, head := -1, (*event)(nil)
	if len(q.msgs.h) > 0 {
		which, head = 0, &q.msgs.h[0]
	}
	if len(q.timers.h) > 0 && (head == nil || q.timers.h[0].before(head)) {
		which, head = 1, &q.timers.h[0]
	}
	if len(q.ticks.h) > 0 && (head == nil || q.ticks.h[0].before(head)) {
		which, head = 2, &q.ticks.h[0]
	}
	return which, head
}

// peek returns the earliest event; the queue must not be empty.
func (q *queue) peek() *event {
	_, e := q.first()
	return e
}

// pop removes and returns the earliest event; the queue must not be empty.
func (q *queue) pop() event {
	switch w, _ := q.first(); w {
	case 0:
		return q.msgs.pop()
	case 1:
		return q.timers.pop()
	}
	return q.ticks.pop()
}

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

// tickHeap is a binary min-heap of ticks, at most one per rank, with each
// rank's position kept so that its tick can be moved in place.
type tickHeap struct {
	h   []event
	pos []int32 // per rank: index in h, or -1
}

func (t *tickHeap) swap(i, j int) {
	t.h[i], t.h[j] = t.h[j], t.h[i]
	t.pos[t.h[i].rank] = int32(i)
	t.pos[t.h[j].rank] = int32(j)
}

func (t *tickHeap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !t.h[i].before(&t.h[p]) {
			break
		}
		t.swap(i, p)
		i = p
	}
}

func (t *tickHeap) down(i int) {
	n := len(t.h)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && t.h[r].before(&t.h[l]) {
			m = r
		}
		if !t.h[m].before(&t.h[i]) {
			return
		}
		t.swap(i, m)
		i = m
	}
}

// set inserts e, or moves e.rank's tick to e.
func (t *tickHeap) set(e event) {
	for int(e.rank) >= len(t.pos) {
		t.pos = append(t.pos, -1)
	}
	if i := t.pos[e.rank]; i >= 0 {
		t.h[i] = e
		t.up(int(i))
		t.down(int(t.pos[e.rank]))
		return
	}
	t.h = append(t.h, e)
	t.pos[e.rank] = int32(len(t.h) - 1)
	t.up(len(t.h) - 1)
}

func (t *tickHeap) pop() event {
	top := t.h[0]
	n := len(t.h) - 1
	t.swap(0, n)
	t.h = t.h[:n]
	t.pos[top.rank] = -1
	t.down(0)
	return top
}
