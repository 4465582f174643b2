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
// are served in arrival order: a large request at the head holds back
// smaller ones behind it, as in Ceph.
//
// Fair shares (issue 18). The messenger takes budget on behalf of its
// connections, each one a holder with an account at the throttle. A
// holder that already holds something may take more only while the
// throttle stays within three quarters of max and, once more than half of
// max is held (pressure), only within its share: three quarters of max
// divided among the holders that hold something or wait. Otherwise it
// waits, and waiters within their share are served before it, in arrival
// order. So connections that flood cannot hold the whole budget, even
// one alone: the last quarter is kept for takes by holders that hold
// nothing, and an honest connection is admitted at once, however many
// flood, as long as that quarter holds one message per flooding
// connection (100 MiB of dispatch bytes: 400 connections' 64 KiB
// messages); beyond that it is first in line at the next release. A
// holder with nothing held is never held back by its share, so a take as
// large as max still goes through. Get, TryGet and Put, called directly,
// take and return budget for no holder, which is never held back.
//
// All methods are safe for concurrent use. A nil *Throttle is unlimited: Get
// and TryGet succeed at once, Put and SetMax do nothing, and the accessors
// return zero values.
type Throttle struct {
	name string

	mu      sync.Mutex
	max     int64
	cur     int64
	holders int64                   // holds that hold something or wait
	waiters waitQueue[throttleWant] // blocked Get calls and what each asks for
}

// throttleHold is one holder's account at one Throttle: what a connection
// holds of it and how many of its Gets wait. It is guarded by the
// throttle's mutex.
type throttleHold struct {
	held  int64
	waits int32
}

// throttleWant is what a blocked Get asks for, and for whom (nil: no
// holder).
type throttleWant struct {
	c int64
	h *throttleHold
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
	return t.get(ctx, nil, c)
}

// get is Get for holder h (nil: none).
func (t *Throttle) get(ctx context.Context, h *throttleHold, c int64) error {
	if t == nil || c <= 0 {
		return nil
	}
	t.mu.Lock()
	if t.admits(h, c) {
		t.take(h, c)
		t.mu.Unlock()
		return nil
	}
	if h != nil {
		if h.held == 0 && h.waits == 0 {
			t.holders++
		}
		h.waits++
	}
	w := t.waiters.enqueue(throttleWant{c: c, h: h})
	_, err := t.waiters.wait(ctx, &t.mu, w)
	if err != nil {
		// w left the queue taking nothing. Its holder may have left
		// (the others' shares grow) or it may have held back the
		// ones behind it; either way some may fit now.
		if h != nil {
			h.waits--
			if h.held == 0 && h.waits == 0 {
				t.holders--
			}
		}
		t.throttleWake()
	}
	t.mu.Unlock()
	return err
}

// TryGet is Ceph's get_or_fail: it takes c units and returns true if Get
// would not wait, and otherwise takes nothing and returns false. It fails
// whenever a caller that would be served first is waiting (any waiter
// within its share), so it never overtakes them. A c <= 0 returns true.
func (t *Throttle) TryGet(c int64) bool {
	return t.tryGet(nil, c)
}

// tryGet is TryGet for holder h (nil: none).
func (t *Throttle) tryGet(h *throttleHold, c int64) bool {
	if t == nil || c <= 0 {
		return true
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.admits(h, c) {
		return false
	}
	t.take(h, c)
	return true
}

// admits reports whether holder h may take c units at once: they fit,
// h is within its share, and no waiter that may be served goes first.
// Callers hold t.mu.
func (t *Throttle) admits(h *throttleHold, c int64) bool {
	return !t.throttleShouldWait(c) && !t.overShare(h, c) && t.nextServed() == nil
}

// take gives c units to holder h. Callers hold t.mu.
func (t *Throttle) take(h *throttleHold, c int64) {
	t.cur += c
	if h != nil {
		if h.held == 0 && h.waits == 0 {
			t.holders++
		}
		h.held += c
	}
}

// overShare reports whether holder h, taking c more units, would go over
// its fair share (see Throttle). Callers hold t.mu.
func (t *Throttle) overShare(h *throttleHold, c int64) bool {
	if h == nil || h.held == 0 || t.max <= 0 {
		return false
	}
	shared := t.max - t.max/4 // the last quarter is for first takes
	if t.cur+c > shared {
		return true
	}
	return t.cur > t.max/2 && h.held+c > shared/t.holders
}

// nextServed returns the waiter to serve next: the first, in arrival
// order, that is within its share, or nil if none is. Callers hold t.mu.
func (t *Throttle) nextServed() *waiter[throttleWant] {
	for w := t.waiters.front(); w != nil; w = t.waiters.next(w) {
		if !t.overShare(w.v.h, w.v.c) {
			return w
		}
	}
	return nil
}

// Put returns c units and admits waiters, in order, that now fit. Putting
// more than is held is a caller bug: the count is clamped at zero and a
// warning is logged. A c <= 0 does nothing.
func (t *Throttle) Put(c int64) {
	t.put(nil, c)
}

// put is Put for holder h (nil: none).
func (t *Throttle) put(h *throttleHold, c int64) {
	if t == nil || c <= 0 {
		return
	}
	t.mu.Lock()
	if h != nil {
		h.held -= min(c, h.held)
		if h.held == 0 && h.waits == 0 {
			t.holders--
		}
	}
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

// throttleWake grants budget to the waiter nextServed names for as long
// as it fits. Callers hold t.mu. Every change to cur, max or the holders
// is followed by it, so the waiter to serve never fits while it waits.
func (t *Throttle) throttleWake() {
	for w := t.nextServed(); w != nil && !t.throttleShouldWait(w.v.c); w = t.nextServed() {
		t.cur += w.v.c
		if h := w.v.h; h != nil {
			h.waits--
			h.held += w.v.c
		}
		t.waiters.wake(w, nil)
	}
}

// connHolds is a connection's accounts at the receive throttles it takes
// budget from: its policy's message and byte throttles and the
// messenger's dispatch-bytes throttle. A nil *connHolds takes and
// returns budget for no holder.
type connHolds struct {
	msgs, bytes, dispatch throttleHold
}

// put returns one message and size bytes to p's throttles and size
// bytes to m's dispatch throttle.
func (h *connHolds) put(m *Messenger, p *Policy, size int64) {
	var hm, hb, hd *throttleHold
	if h != nil {
		hm, hb, hd = &h.msgs, &h.bytes, &h.dispatch
	}
	m.dispatch.put(hd, size)
	p.ThrottleBytes.put(hb, size)
	p.ThrottleMessages.put(hm, 1)
}

// takeBudget takes one message and size bytes from the policy throttles
// and size bytes from the dispatch throttle, in Ceph's order, waiting as
// long as the connection is open, each within the connection's fair
// share (see Throttle). Before it waits it writes what the reader was
// left to write (the answers of the messages whose dispatch returns the
// budget may be among it).
// It reports whether it had to wait (the message's ThrottleStamp is then
// taken after the wait).
func (c *Conn) takeBudget(p *Policy, size int64, r *socketRun) (waited bool, err error) {
	h := &c.holds
	if p.ThrottleMessages.tryGet(&h.msgs, 1) {
		if p.ThrottleBytes.tryGet(&h.bytes, size) {
			if c.m.dispatch.tryGet(&h.dispatch, size) {
				return false, nil
			}
			p.ThrottleBytes.put(&h.bytes, size)
		}
		p.ThrottleMessages.put(&h.msgs, 1)
	}
	c.m.met.throttleWait()
	c.flushLeft(r)
	if err := p.ThrottleMessages.get(c.ctx, &h.msgs, 1); err != nil {
		return true, err
	}
	if err := p.ThrottleBytes.get(c.ctx, &h.bytes, size); err != nil {
		p.ThrottleMessages.put(&h.msgs, 1)
		return true, err
	}
	if err := c.m.dispatch.get(c.ctx, &h.dispatch, size); err != nil {
		p.ThrottleBytes.put(&h.bytes, size)
		p.ThrottleMessages.put(&h.msgs, 1)
		return true, err
	}
	return true, nil
}

// budgetFree reports whether takeBudget would take size now without
// waiting (it takes nothing): a caller holding the reader role that only
// reads on while it costs no wait (Conn.drainBuffered) asks first.
func (c *Conn) budgetFree(p *Policy, size int64) bool {
	h := &c.holds
	return p.ThrottleMessages.admitsNow(&h.msgs, 1) && p.ThrottleBytes.admitsNow(&h.bytes, size) &&
		c.m.dispatch.admitsNow(&h.dispatch, size) && !c.m.budget.pressure()
}

// admitsNow reports whether tryGet(h, c) would succeed now, taking
// nothing.
func (t *Throttle) admitsNow(h *throttleHold, c int64) bool {
	if t == nil || c <= 0 {
		return true
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.admits(h, c)
}

// putBudget returns what takeBudget took (nothing if size is 0).
func (c *Conn) putBudget(p *Policy, size int64) {
	if size == 0 {
		return
	}
	c.m.release(dispatchItem{kind: itemMessage, c: c, pol: p, bytes: size})
}
