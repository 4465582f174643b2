package msgr

import (
	"context"
	"log/slog"
	"sync"
)

// Throttle bounds a count, such as messages or bytes in flight; it is Ceph's
// Throttle (src/common/Throttle.h). Get takes budget and waits while there is
// not enough; Put returns it.
//
// Ceph's waiting rule applies: with max > 0, a request for c waits while
//
//	(c <= max && cur+c > max) || (c >= max && cur > max)
//
// so a request larger than max is let through once the count is at most max
// (at worst when nothing else is held) rather than waiting forever. Waiters
// are served strictly in arrival order: a large request at the head holds
// back smaller ones behind it, as in Ceph.
//
// All methods are safe for concurrent use. A nil *Throttle is unlimited: Get
// and TryGet succeed at once, Put and SetMax do nothing, and the accessors
// return zero values.
type Throttle struct {
	name string

	mu    sync.Mutex
	max   int64
	cur   int64
	head  *throttleWaiter // FIFO of blocked Get calls
	tail  *throttleWaiter
	nw    int             // waiters in the FIFO
	free  *throttleWaiter // reusable waiters, linked by next
	nfree int
}

// throttleWaiter is one Get blocked in the FIFO. It is reused: granted is
// set and ch signalled under Throttle.mu.
type throttleWaiter struct {
	next, prev *throttleWaiter
	c          int64
	granted    bool
	ch         chan struct{} // capacity 1
}

// throttleFreeMax bounds the number of waiters kept for reuse.
const throttleFreeMax = 64

// NewThrottle returns a throttle named name (used in logs) that admits up to
// max units at a time; max 0 means unlimited (the count is still kept).
// A negative max is treated as 0.
func NewThrottle(name string, max int64) *Throttle {
	if max < 0 {
		max = 0
	}
	return &Throttle{name: name, max: max}
}

// Name returns the name given to NewThrottle ("" for a nil Throttle).
func (t *Throttle) Name() string {
	if t == nil {
		return ""
	}
	return t.name
}

// throttleShouldWait is Ceph's Throttle::_should_wait. Callers hold t.mu.
func (t *Throttle) throttleShouldWait(c int64) bool {
	m := t.max
	return m > 0 && ((c <= m && t.cur+c > m) || (c >= m && t.cur > m))
}

// Get takes c units, waiting as long as Ceph's rule requires and behind any
// earlier waiters. It returns nil once the units are taken. If ctx ends
// before that, Get returns ctx.Err() and takes nothing; if the units were
// granted at the moment ctx ended, Get returns nil and the caller holds
// them. Get does not look at ctx when it need not wait. A c <= 0 takes
// nothing and returns nil.
func (t *Throttle) Get(ctx context.Context, c int64) error {
	if t == nil || c <= 0 {
		return nil
	}
	t.mu.Lock()
	if t.head == nil && !t.throttleShouldWait(c) {
		t.cur += c
		t.mu.Unlock()
		return nil
	}
	w := t.throttleNewWaiter(c)
	t.throttlePush(w)
	t.mu.Unlock()

	var err error
	select {
	case <-w.ch:
		t.mu.Lock()
	case <-ctx.Done():
		t.mu.Lock()
		if w.granted {
			<-w.ch // the grant won the race; consume its signal
		} else {
			wasHead := t.head == w
			t.throttleRemove(w)
			if wasHead {
				t.throttleWake() // the next waiter may fit now
			}
			err = ctx.Err()
		}
	}
	t.throttleRelease(w)
	t.mu.Unlock()
	return err
}

// TryGet is Ceph's get_or_fail: it takes c units and returns true if Get
// would not wait, and otherwise takes nothing and returns false. It fails
// whenever other callers are waiting, so it never overtakes them. A c <= 0
// returns true.
func (t *Throttle) TryGet(c int64) bool {
	if t == nil || c <= 0 {
		return true
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.head != nil || t.throttleShouldWait(c) {
		return false
	}
	t.cur += c
	return true
}

// Put returns c units and admits waiters, in order, that now fit. Putting
// more than is held is a caller bug: the count is clamped at zero and a
// warning is logged. A c <= 0 does nothing.
func (t *Throttle) Put(c int64) {
	if t == nil || c <= 0 {
		return
	}
	t.mu.Lock()
	if c > t.cur {
		cur := t.cur
		t.cur = 0
		t.throttleWake()
		t.mu.Unlock()
		slog.Warn("msgr: throttle put more than taken", "throttle", t.name, "put", c, "current", cur)
		return
	}
	t.cur -= c
	t.throttleWake()
	t.mu.Unlock()
}

// SetMax changes the bound (0: unlimited; negative is treated as 0) and
// admits waiters that fit under the new bound. Units already held are not
// affected, so the count may stay above a lowered bound until they are put.
func (t *Throttle) SetMax(m int64) {
	if t == nil {
		return
	}
	t.mu.Lock()
	t.max = max(m, 0)
	t.throttleWake()
	t.mu.Unlock()
}

// Current returns the number of units held.
func (t *Throttle) Current() int64 {
	if t == nil {
		return 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.cur
}

// Max returns the bound (0: unlimited).
func (t *Throttle) Max() int64 {
	if t == nil {
		return 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.max
}

// Waiters returns the number of Get calls waiting.
func (t *Throttle) Waiters() int {
	if t == nil {
		return 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.nw
}

// throttleWake grants budget to waiters at the head of the FIFO for as long
// as the head fits. Callers hold t.mu.
func (t *Throttle) throttleWake() {
	for w := t.head; w != nil && !t.throttleShouldWait(w.c); w = t.head {
		t.throttleRemove(w)
		t.cur += w.c
		w.granted = true
		w.ch <- struct{}{} // capacity 1, empty: never blocks
	}
}

func (t *Throttle) throttleNewWaiter(c int64) *throttleWaiter {
	w := t.free
	if w != nil {
		t.free = w.next
		t.nfree--
		w.next = nil
	} else {
		w = &throttleWaiter{ch: make(chan struct{}, 1)}
	}
	w.c = c
	w.granted = false
	return w
}

// throttleRelease keeps w for reuse. Its channel is empty by now.
func (t *Throttle) throttleRelease(w *throttleWaiter) {
	if t.nfree >= throttleFreeMax {
		return
	}
	*w = throttleWaiter{next: t.free, ch: w.ch}
	t.free = w
	t.nfree++
}

func (t *Throttle) throttlePush(w *throttleWaiter) {
	w.prev = t.tail
	w.next = nil
	if t.tail != nil {
		t.tail.next = w
	} else {
		t.head = w
	}
	t.tail = w
	t.nw++
}

func (t *Throttle) throttleRemove(w *throttleWaiter) {
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		t.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		t.tail = w.prev
	}
	w.next, w.prev = nil, nil
	t.nw--
}
