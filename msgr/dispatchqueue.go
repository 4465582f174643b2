package msgr

import (
	"context"
	"errors"
	"math/bits"
	"sync"

	"github.com/ferrymsg/ferry/msg"
)

// ErrQueueClosed is returned by DispatchQueue.Enqueue after Close, and by
// DispatchQueue.Dequeue once the queue is closed and drained.
var ErrQueueClosed = errors.New("msgr: dispatch queue closed")

// Scheduling constants of the dispatch queue (Ceph's ms_pq_* defaults).
const (
	dqStrictPrio = uint16(msg.PrioLow) // priorities at or above are strict
	dqMaxTokens  = 16 << 20            // ms_pq_max_tokens_per_priority: token cap per priority, and cost cap
	dqMinCost    = 64 << 10            // ms_pq_min_cost: smallest cost charged per item
)

const (
	dqFreeOwnersMax = 256  // dqOwner structs kept for reuse
	dqKeepRingCap   = 1024 // a reused dqOwner keeps rings up to this capacity
	dqLoWords       = 4    // bitmap words of priorities 0..255, kept inline
)

// DispatchQueue is the receive side's priority queue in front of the
// dispatchers: Ceph's DispatchQueue with its PrioritizedQueue. Each item has
// a priority, a cost (its size in bytes) and an owner (the id of the
// connection it came from).
//
// Scheduling follows Ceph:
//
//   - Priorities >= 64 (msg.PrioLow) are strict: the highest priority with
//     items is always served first.
//   - Priorities < 64 are served only when no strict item is queued. They
//     share the queue by cost with token buckets: every dequeue of a
//     low-priority item of cost c gives each low priority p with items
//     p*c/total+1 tokens (total is the sum of those priorities; at most
//     16 MiB per priority), and the lowest priority whose tokens exceed the
//     cost of its next item is served; if none has enough, the highest is.
//     Costs are clamped to [64 KiB, 16 MiB]. Higher priorities get
//     proportionally more, and none starves.
//   - Within one priority, owners are served round robin, one item per turn,
//     so a busy connection cannot starve another at the same priority.
//   - Within one priority and owner, items leave in the order they were
//     enqueued (items added by EnqueueFront first). This is what keeps a
//     session's messages in order. Items of one owner at different
//     priorities may be reordered, as in Ceph.
//
// Overflow policy: with maxItems > 0, Enqueue stalls the producer while
// maxItems items are queued, and blocked producers are admitted in arrival
// order as items leave. EnqueueFront never blocks and may go beyond the
// bound.
//
// Every operation is O(1) for a given number of distinct queued priorities
// (DropOwner is linear in the queue's owners). Enqueue and Dequeue do not
// allocate in steady state beyond amortised ring growth.
//
// All methods are safe for concurrent use.
type DispatchQueue[T any] struct {
	mu       sync.Mutex
	maxItems int
	n        int // items queued
	closed   bool

	// The levels by priority, allocated on first use: those below 256
	// (Ceph's priorities, and all the messenger's) in one block, the
	// others in blocks of 256 under levelsHi. Neither is allocated before
	// the first item: a messenger that holds a queue but no item keeps a
	// few hundred bytes, not the 10 KiB of a flat layout.
	levels0  *[256]*dqLevel[T]
	levelsHi *[255]*[256]*dqLevel[T]

	// Strict priorities with items: a two-level bitmap over 0..65535
	// (only bits >= dqStrictPrio are used). The words of priorities from
	// 256 up are allocated when one is first used (strictWord).
	strictLo      [dqLoWords]uint64
	strictHi      *[1024 - dqLoWords]uint64
	strictSummary [16]uint64

	lowBits  uint64 // low priorities (< 64) with items
	lowTotal int64  // sum of the low priorities with items

	producers waitQueue[dqProducer[T]] // Enqueue calls waiting for room, FIFO
	consumers waitQueue[T]             // Dequeue calls waiting for an item, FIFO; handed it in v

	freeOwners []*dqOwner[T]
}

// dqProducer is what a blocked Enqueue asks to queue.
type dqProducer[T any] struct {
	owner uint64
	prio  uint16
	cost  int64
	v     T
}

// dqEntry is one queued item.
type dqEntry[T any] struct {
	v    T
	cost int64
}

// dqOwner is one owner's items at one priority. It is in its level's owners
// map and round-robin ring exactly while it holds items.
type dqOwner[T any] struct {
	id    uint64
	front dqRing[dqEntry[T]] // added by EnqueueFront; served first
	back  dqRing[dqEntry[T]] // added by Enqueue
}

func (o *dqOwner[T]) dqLen() int { return o.front.n + o.back.n }

func (o *dqOwner[T]) dqPeek() *dqEntry[T] {
	if o.front.n > 0 {
		return o.front.dqFront()
	}
	return o.back.dqFront()
}

func (o *dqOwner[T]) dqPop() dqEntry[T] {
	if o.front.n > 0 {
		return o.front.dqPopFront()
	}
	return o.back.dqPopFront()
}

// dqLevel holds the items of one priority.
type dqLevel[T any] struct {
	prio   uint16
	n      int
	tokens int64 // low priorities only
	owners map[uint64]*dqOwner[T]
	rr     dqRing[*dqOwner[T]] // owners with items, in serving order
}

// NewDispatchQueue returns an empty queue that holds at most maxItems items
// added by Enqueue (0: unbounded).
func NewDispatchQueue[T any](maxItems int) *DispatchQueue[T] {
	return &DispatchQueue[T]{maxItems: max(maxItems, 0)}
}

// Enqueue adds v for owner at priority prio with the given cost in bytes.
// If the queue is full it waits, behind producers that came earlier, until
// there is room. It returns ErrQueueClosed if the queue is or gets closed,
// and ctx.Err() if ctx ends first; in both cases v is not queued. Enqueue
// does not look at ctx when it need not wait.
//
// An Enqueue blocked for an owner is not affected by DropOwner; cancel its
// ctx first.
func (q *DispatchQueue[T]) Enqueue(ctx context.Context, owner uint64, prio uint16, cost int, v T) error {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return ErrQueueClosed
	}
	if q.maxItems == 0 || (q.n < q.maxItems && q.producers.len() == 0) {
		q.dqInsert(owner, prio, int64(cost), false, v)
		q.mu.Unlock()
		return nil
	}
	w := q.producers.enqueue(dqProducer[T]{owner: owner, prio: prio, cost: int64(cost), v: v})
	// A producer that gives up frees no room (producers wait only while
	// the queue is full), so nobody behind it needs admitting.
	_, err := q.producers.wait(ctx, &q.mu, w)
	q.mu.Unlock()
	return err
}

// EnqueueFront adds v for owner at priority prio ahead of the items that
// owner has queued with Enqueue at that priority, and behind earlier
// EnqueueFront items of the same owner and priority (so events stay in
// order). It never blocks and ignores the bound; it is meant for the
// messenger's connect, accept and reset events, which Ceph queues strict at
// priority 255 under owner 0 (connection ids start at 1), behind earlier
// events and round robin with the connections' messages at 255. After
// Close, v is discarded, as Ceph drops events once its queue is stopped.
func (q *DispatchQueue[T]) EnqueueFront(owner uint64, prio uint16, v T) {
	q.mu.Lock()
	if !q.closed {
		q.dqInsert(owner, prio, 0, true, v)
	}
	q.mu.Unlock()
}

// Dequeue removes and returns the next item, waiting until there is one.
// It returns ctx.Err() if ctx ends first, and ErrQueueClosed once the queue
// is closed and empty. It does not look at ctx when an item is ready.
// Waiting callers are served in arrival order.
func (q *DispatchQueue[T]) Dequeue(ctx context.Context) (T, error) {
	q.mu.Lock()
	if q.n > 0 {
		v := q.dqPop()
		q.dqAdmit()
		q.mu.Unlock()
		return v, nil
	}
	if q.closed {
		q.mu.Unlock()
		var zero T
		return zero, ErrQueueClosed
	}
	var zero T
	w := q.consumers.enqueue(zero)
	v, err := q.consumers.wait(ctx, &q.mu, w)
	q.mu.Unlock()
	return v, err
}

// TryDequeue removes and returns the next item if there is one, without
// waiting. After Close it still returns the items left in the queue.
func (q *DispatchQueue[T]) TryDequeue() (T, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.n == 0 {
		var zero T
		return zero, false
	}
	v := q.dqPop()
	q.dqAdmit()
	return v, true
}

// Close closes the queue: later and blocked Enqueue calls return
// ErrQueueClosed, and Dequeue returns the items still queued and then
// ErrQueueClosed. Close is idempotent.
func (q *DispatchQueue[T]) Close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return
	}
	q.closed = true
	q.producers.wakeAll(ErrQueueClosed)
	// Consumers wait only while the queue is empty.
	q.consumers.wakeAll(ErrQueueClosed)
}

// Len returns the number of items queued (not counting blocked Enqueue
// calls).
func (q *DispatchQueue[T]) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.n
}

// DropOwner removes every queued item of owner, at every priority, and then
// calls fn (if not nil) on each, from the highest priority to the lowest and
// in queue order within one, without holding the queue's lock; the caller
// uses this to return throttle budget when a connection is marked down.
// Enqueue calls still blocked for owner are not affected.
func (q *DispatchQueue[T]) DropOwner(owner uint64, fn func(T)) {
	var dropped []T
	q.mu.Lock()
	for p := q.dqHighestStrict(); p >= 0; p = q.dqNextStrictBelow(p) {
		dropped = q.dqDropAt(uint16(p), owner, dropped)
	}
	for b := q.lowBits; b != 0; {
		p := 63 - bits.LeadingZeros64(b)
		b &^= 1 << p
		dropped = q.dqDropAt(uint16(p), owner, dropped)
	}
	q.dqAdmit()
	q.mu.Unlock()
	if fn != nil {
		for _, v := range dropped {
			fn(v)
		}
	}
}

// dqProducersWaiting returns the number of blocked Enqueue calls (tests).
func (q *DispatchQueue[T]) dqProducersWaiting() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.producers.len()
}

// dqConsumersWaiting returns the number of blocked Dequeue calls (tests).
func (q *DispatchQueue[T]) dqConsumersWaiting() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.consumers.len()
}

// dqInsert queues one item, or hands it straight to a waiting consumer
// (consumers wait only while the queue is empty). Callers hold q.mu.
func (q *DispatchQueue[T]) dqInsert(owner uint64, prio uint16, cost int64, front bool, v T) {
	if w := q.consumers.front(); w != nil {
		w.v = v
		q.consumers.wake(w, nil)
		return
	}
	if prio < dqStrictPrio {
		cost = min(max(cost, dqMinCost), dqMaxTokens)
	}
	l := q.dqLevel(prio)
	o := l.owners[owner]
	if o == nil {
		o = q.dqNewOwner(owner)
		l.owners[owner] = o
		l.rr.dqPushBack(o)
	}
	e := dqEntry[T]{v: v, cost: cost}
	if front {
		o.front.dqPushBack(e)
	} else {
		o.back.dqPushBack(e)
	}
	if l.n == 0 {
		q.dqMarkNonEmpty(prio)
	}
	l.n++
	q.n++
}

// dqPop removes the next item according to the scheduling rules. Callers
// hold q.mu and have checked q.n > 0.
func (q *DispatchQueue[T]) dqPop() T {
	if p := q.dqHighestStrict(); p >= 0 {
		return q.dqPopAt(q.dqLevel(uint16(p))).v
	}
	// Lowest priority whose tokens exceed its next item's cost.
	for b := q.lowBits; b != 0; b &= b - 1 {
		l := q.dqLevel(uint16(bits.TrailingZeros64(b)))
		cost := (*l.rr.dqFront()).dqPeek().cost
		if cost < l.tokens {
			l.tokens -= cost
			e := q.dqPopAt(l)
			q.dqDistribute(cost)
			return e.v
		}
	}
	// None has enough: the highest is served.
	l := q.dqLevel(uint16(63 - bits.LeadingZeros64(q.lowBits)))
	e := q.dqPopAt(l)
	q.dqDistribute(e.cost)
	return e.v
}

// dqPopAt removes the next item of level l (round robin over owners).
func (q *DispatchQueue[T]) dqPopAt(l *dqLevel[T]) dqEntry[T] {
	o := l.rr.dqPopFront()
	e := o.dqPop()
	if o.dqLen() > 0 {
		l.rr.dqPushBack(o)
	} else {
		delete(l.owners, o.id)
		q.dqFreeOwner(o)
	}
	l.n--
	q.n--
	if l.n == 0 {
		q.dqMarkEmpty(l.prio)
		l.tokens = 0
	}
	return e
}

// dqDistribute is Ceph's distribute_tokens: after a low-priority item of
// cost c leaves, each low priority with items earns its share of c.
func (q *DispatchQueue[T]) dqDistribute(c int64) {
	if q.lowTotal == 0 {
		return
	}
	for b := q.lowBits; b != 0; b &= b - 1 {
		p := bits.TrailingZeros64(b)
		l := q.dqLevel(uint16(p))
		l.tokens = min(l.tokens+int64(p)*c/q.lowTotal+1, dqMaxTokens)
	}
}

// dqDropAt removes owner's items at priority p, appending them to out.
func (q *DispatchQueue[T]) dqDropAt(p uint16, owner uint64, out []T) []T {
	l := q.dqLevel(p)
	o := l.owners[owner]
	if o == nil {
		return out
	}
	for o.dqLen() > 0 {
		out = append(out, o.dqPop().v)
		l.n--
		q.n--
	}
	delete(l.owners, owner)
	// Take o out of the ring, keeping the others' order.
	for i, k := 0, l.rr.n; i < k; i++ {
		x := l.rr.dqPopFront()
		if x != o {
			l.rr.dqPushBack(x)
		}
	}
	q.dqFreeOwner(o)
	if l.n == 0 {
		q.dqMarkEmpty(p)
		l.tokens = 0
	}
	return out
}

// dqAdmit moves blocked producers into the queue while there is room.
func (q *DispatchQueue[T]) dqAdmit() {
	for w := q.producers.front(); w != nil && (q.maxItems == 0 || q.n < q.maxItems); w = q.producers.front() {
		p := w.v
		q.producers.wake(w, nil)
		q.dqInsert(p.owner, p.prio, p.cost, false, p.v)
	}
}

// dqLevel returns the level of priority p, creating it on first use.
func (q *DispatchQueue[T]) dqLevel(p uint16) *dqLevel[T] {
	var blk *[256]*dqLevel[T]
	if p < 256 {
		if q.levels0 == nil {
			q.levels0 = new([256]*dqLevel[T])
		}
		blk = q.levels0
	} else {
		if q.levelsHi == nil {
			q.levelsHi = new([255]*[256]*dqLevel[T])
		}
		blk = q.levelsHi[p>>8-1]
		if blk == nil {
			blk = new([256]*dqLevel[T])
			q.levelsHi[p>>8-1] = blk
		}
	}
	l := blk[p&0xff]
	if l == nil {
		l = &dqLevel[T]{prio: p, owners: make(map[uint64]*dqOwner[T])}
		blk[p&0xff] = l
	}
	return l
}

func (q *DispatchQueue[T]) dqMarkNonEmpty(p uint16) {
	if p < dqStrictPrio {
		q.lowBits |= 1 << p
		q.lowTotal += int64(p)
		return
	}
	*q.strictWordPtr(int(p >> 6)) |= 1 << (p & 63)
	q.strictSummary[p>>12] |= 1 << ((p >> 6) & 63)
}

func (q *DispatchQueue[T]) dqMarkEmpty(p uint16) {
	if p < dqStrictPrio {
		q.lowBits &^= 1 << p
		q.lowTotal -= int64(p)
		return
	}
	w := q.strictWordPtr(int(p >> 6))
	*w &^= 1 << (p & 63)
	if *w == 0 {
		q.strictSummary[p>>12] &^= 1 << ((p >> 6) & 63)
	}
}

// strictWord returns bitmap word w (priorities 64w to 64w+63).
func (q *DispatchQueue[T]) strictWord(w int) uint64 {
	if w < dqLoWords {
		return q.strictLo[w]
	}
	if q.strictHi == nil {
		return 0
	}
	return q.strictHi[w-dqLoWords]
}

// strictWordPtr returns bitmap word w to update, allocating the words
// from dqLoWords up on first use.
func (q *DispatchQueue[T]) strictWordPtr(w int) *uint64 {
	if w < dqLoWords {
		return &q.strictLo[w]
	}
	if q.strictHi == nil {
		q.strictHi = new([1024 - dqLoWords]uint64)
	}
	return &q.strictHi[w-dqLoWords]
}

// dqHighestStrict returns the highest strict priority with items, or -1.
func (q *DispatchQueue[T]) dqHighestStrict() int {
	for i := len(q.strictSummary) - 1; i >= 0; i-- {
		if s := q.strictSummary[i]; s != 0 {
			w := i*64 + 63 - bits.LeadingZeros64(s)
			return w*64 + 63 - bits.LeadingZeros64(q.strictWord(w))
		}
	}
	return -1
}

// dqNextStrictBelow returns the highest strict priority below p with
// items, or -1.
func (q *DispatchQueue[T]) dqNextStrictBelow(p int) int {
	w := p >> 6
	if m := q.strictWord(w) & (1<<(p&63) - 1); m != 0 {
		return w*64 + 63 - bits.LeadingZeros64(m)
	}
	for w--; w >= 0; w-- {
		if q.strictSummary[w>>6]&(1<<(w&63)) != 0 {
			return w*64 + 63 - bits.LeadingZeros64(q.strictWord(w))
		}
	}
	return -1
}

func (q *DispatchQueue[T]) dqNewOwner(id uint64) *dqOwner[T] {
	if n := len(q.freeOwners); n > 0 {
		o := q.freeOwners[n-1]
		q.freeOwners[n-1] = nil
		q.freeOwners = q.freeOwners[:n-1]
		o.id = id
		return o
	}
	return &dqOwner[T]{id: id}
}

// dqFreeOwner keeps an emptied owner for reuse.
func (q *DispatchQueue[T]) dqFreeOwner(o *dqOwner[T]) {
	if len(q.freeOwners) >= dqFreeOwnersMax {
		return
	}
	if cap(o.front.buf) > dqKeepRingCap {
		o.front = dqRing[dqEntry[T]]{}
	}
	if cap(o.back.buf) > dqKeepRingCap {
		o.back = dqRing[dqEntry[T]]{}
	}
	q.freeOwners = append(q.freeOwners, o)
}

// dqRing is a FIFO ring buffer whose capacity is a power of two.
type dqRing[E any] struct {
	buf  []E
	head int
	n    int
}

func (r *dqRing[E]) dqPushBack(e E) {
	if r.n == len(r.buf) {
		r.dqGrow()
	}
	r.buf[(r.head+r.n)&(len(r.buf)-1)] = e
	r.n++
}

// dqFront returns the first element; the ring must not be empty.
func (r *dqRing[E]) dqFront() *E {
	return &r.buf[r.head]
}

func (r *dqRing[E]) dqPopFront() E {
	var zero E
	e := r.buf[r.head]
	r.buf[r.head] = zero
	r.head = (r.head + 1) & (len(r.buf) - 1)
	r.n--
	return e
}

func (r *dqRing[E]) dqGrow() {
	nb := make([]E, max(4, 2*len(r.buf)))
	for i := 0; i < r.n; i++ {
		nb[i] = r.buf[(r.head+i)&(len(r.buf)-1)]
	}
	r.buf, r.head = nb, 0
}
