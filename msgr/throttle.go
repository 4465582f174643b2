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

	mu      sync.Mutex
	max     int64
	cur     int64
	waiters waitQueue[int64] // blocked Get calls and the units each asks for
}

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
	if t.waiters.len() == 0 && !t.throttleShouldWait(c) {
		t.cur += c
		t.mu.Unlock()
		return nil
	}
	w := t.waiters.enqueue(c)
	_, err := t.waiters.wait(ctx, &t.mu, w)
	if err != nil {
		// w left the FIFO taking nothing. If it was the head, the one
		// behind it may fit now; otherwise the head is unchanged and
		// still does not fit, so this admits nobody.
		t.throttleWake()
	}
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
	if t.waiters.len() != 0 || t.throttleShouldWait(c) {
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
	return t.waiters.len()
}

// throttleWake grants budget to waiters at the head of the FIFO for as long
// as the head fits. Callers hold t.mu. Every change to cur or max is
// followed by it, so the head never fits while it waits.
func (t *Throttle) throttleWake() {
	for w := t.waiters.front(); w != nil && !t.throttleShouldWait(w.v); w = t.waiters.front() {
		t.cur += w.v
		t.waiters.wake(w, nil)
	}
}
